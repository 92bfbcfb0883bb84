package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// run acquires a lock, runs a command while renewing the lease every TTL/3, releases the lock
// when the command exits, and exits with the command's code. If the lease is lost (a renewal
// answered 410, or the gateway could not be reached for longer than the TTL), the command gets
// SIGTERM, then SIGKILL after --grace, and run exits with ExitLeaseLost.
func (c *command) run(ctx context.Context, args []string) int {
	f := c.flags("run", "--lock NAME [--owner O] [--ttl D] [--wait D] [--grace D] [--server URL] -- COMMAND [ARGS...]")
	owner := f.fs.String("owner", c.defaultOwner(), "who holds the lock")
	ttl := durationFlag(f.fs, "ttl", 30*time.Second, "lease time to live; renewed every ttl/3")
	wait := durationFlag(f.fs, "wait", 0, "how long to wait for a held lock")
	grace := durationFlag(f.fs, "grace", 10*time.Second, "after SIGTERM, how long before SIGKILL")
	gw, ok := c.parse(f, args)
	if !ok {
		return ExitUsage
	}
	argv := f.fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(c.stderr, "leasegate: run needs a command after --")
		f.fs.Usage()
		return ExitUsage
	}
	if *ttl < 300*time.Millisecond {
		fmt.Fprintln(c.stderr, "leasegate: --ttl must be at least 300ms")
		return ExitUsage
	}

	lease, err := gw.Lock(ctx, *f.lock, leasegate.LockOptions{Owner: *owner, TTL: *ttl, Wait: *wait})
	if err != nil {
		return c.fail(err)
	}
	// Whatever happens, give the lock back (unless it was lost, which Release then says).
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := lease.Release(rctx); err != nil && !errors.Is(err, leasegate.ErrLeaseGone) {
			fmt.Fprintln(c.stderr, "leasegate: releasing the lock:", err)
		}
	}()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
	cmd.Env = append(os.Environ(),
		"LEASEGATE_LOCK="+lease.Lock,
		"LEASEGATE_TOKEN="+lease.Token,
		"LEASEGATE_FENCE="+strconv.FormatInt(lease.Fence, 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // signal the command's whole group
	if err := cmd.Start(); err != nil {
		return c.fail(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)

	// The lease must outlive a signal to this process for as long as the command runs.
	keepCtx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeeping()
	lost := make(chan error, 1)
	go func() { lost <- keepAlive(keepCtx, lease, *ttl) }()

	var killAt <-chan time.Time
	lostLease := false
	for {
		select {
		case err := <-exited:
			stopKeeping()
			if lostLease {
				return ExitLeaseLost
			}
			return exitCode(err)
		case sig := <-signals:
			signalGroup(cmd, sig.(syscall.Signal))
		case err := <-lost:
			if err == nil { // keepAlive ended because ctx did
				continue
			}
			lostLease = true
			fmt.Fprintf(c.stderr, "leasegate: lost the lease on lock %q (%v); stopping the command\n", lease.Lock, err)
			signalGroup(cmd, syscall.SIGTERM)
			killAt = time.After(*grace)
		case <-killAt:
			fmt.Fprintf(c.stderr, "leasegate: the command outlived --grace %v; killing it\n", *grace)
			signalGroup(cmd, syscall.SIGKILL)
		}
	}
}

// keepAlive renews lease every ttl/3 until ctx ends (then it returns nil) or the lease is lost:
// a renewal answered 410, or no renewal succeeded for a whole TTL.
func keepAlive(ctx context.Context, lease *leasegate.Lease, ttl time.Duration) error {
	lastOK := time.Now()
	next := ttl / 3
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
		rctx, cancel := context.WithTimeout(ctx, ttl/3)
		err := lease.Renew(rctx, ttl)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			lastOK, next = time.Now(), ttl/3
		case errors.Is(err, leasegate.ErrLeaseGone):
			return err
		case time.Since(lastOK) >= ttl:
			return fmt.Errorf("no renewal succeeded for %v: %w", ttl, err)
		default:
			next = ttl / 10 // retry soon: the lease is still ours for a while
		}
	}
}

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}

// exitCode turns a command's Wait error into the exit code to pass on: its own, or 128+signal.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return ExitFailed
}
