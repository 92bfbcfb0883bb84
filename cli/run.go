package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// run acquires a lock (exclusively, or shared with --shared), several locks as one multi-lock
// (--lock repeated; --shared then holds each shared) or one permit of a semaphore, runs a command
// while renewing the lease every TTL/3, gives the hold back when the command exits, and exits with
// the command's code.
//
// The command never outlives the lease. run knows when the lease lapses at the earliest (its last
// grant or renewal's TTL, counted from when that request was sent) and, unless a renewal pushes
// that moment back first, sends the command's process group SIGTERM at lapse - grace - margin and
// SIGKILL at lapse - margin, where grace is at most a third of the TTL. Renewals that fail are
// retried every margin until then. A renewal answered 410 (the lease is gone) sends SIGTERM at
// once, and so does the loss the lease's events stream tells of (a force release, or an expiry on
// the gateway: run watches the lease through the --server replicas in turn), within milliseconds
// instead of at the next renewal; SIGKILL follows after grace. After a loss run exits
// ExitLeaseLost.
func (c *command) run(ctx context.Context, args []string) int {
	o, code, ok := c.parseRun(args)
	if !ok {
		return code
	}
	if code, ok := c.runnable(o.argv[0]); !ok {
		return code
	}
	g, err := startGuardian(c.stderr)
	if err != nil {
		return c.fail(err)
	}
	defer g.close()
	start := time.Now()
	lease, err := c.holdOnAny(ctx, o)
	if notAcquired(err) {
		return c.notGranted(ctx, o.t, o.owner, waited(o.wait, start), err)
	}
	if err != nil {
		return c.fail(err)
	}
	return c.runHolding(ctx, o, lease, g)
}

// runnable checks, before anything is taken, that name can be run; as shells do, it returns 127
// for a command that is not found, 126 for one that cannot be run.
func (c *command) runnable(name string) (code int, ok bool) {
	if _, err := exec.LookPath(name); err != nil {
		fmt.Fprintf(c.stderr, "leasegate: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return ExitNotFound, false
		}
		return ExitCannotRun, false
	}
	return 0, true
}

// runHolding runs o.argv while lease is held, as run describes, with g ready to kill it should
// this process die first, gives the hold back when the command exits, and returns run's exit code.
func (c *command) runHolding(ctx context.Context, o runOptions, lease heldLease, g *guardian) int {
	// Learn of a loss (force release, expiry) the moment the gateway does; the stream closes when
	// the lease is released.
	lease.Watch(c.gateways...)
	// Whatever happens, give the hold back (unless it was lost, which Release then says).
	defer c.giveBack(lease, o.t)

	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
	cmd.Env = append(os.Environ(), leaseEnv(o.t, lease)...)
	// The command gets a process group of its own, so that stopping it reaches its children too,
	// except when stdin is a terminal: a background group reading it would be stopped (SIGTTIN).
	if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS); err != nil { // not a terminal
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	// Should this process die (SIGKILL) while the command runs, the guardian kills the command and
	// what it started (guard.go).
	g.starting(tokenEntry(cmd.Env))
	if err := cmd.Start(); err != nil {
		g.exited()
		return c.fail(err)
	}
	g.started(cmd)
	code := c.supervise(ctx, o, lease, cmd)
	g.exited() // only once it has: should this process panic first, the guardian kills the command
	return code
}

// tokenVar is the variable holding the lease's token in the command's environment; the guardian
// knows what the command started by it.
const tokenVar = "LEASEGATE_TOKEN"

// tokenEntry is env's tokenVar line (the last one, which the command gets).
func tokenEntry(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if strings.HasPrefix(env[i], tokenVar+"=") {
			return env[i]
		}
	}
	return ""
}

// runOptions are run's flags, checked.
type runOptions struct {
	t                        target
	owner                    string
	ttl, wait, grace, margin time.Duration // margin: how long before the lease can lapse the command must be gone
	argv                     []string
}

// parseRun reads and checks run's flags; when !ok, run exits with code.
func (c *command) parseRun(args []string) (o runOptions, code int, ok bool) {
	f := c.flags("run", "(--lock NAME [--lock NAME...] [--shared] | --semaphore NAME --permits N) [--owner O] [--ttl D] [--wait D] [--grace D] [--server URL] -- COMMAND [ARGS...]")
	owner := f.fs.String("owner", c.defaultOwner(), "who holds the lock or permit")
	ttl := durationFlag(f.fs, "ttl", 30*time.Second, "lease time to live; renewed every ttl/3")
	wait := durationFlag(f.fs, "wait", 0, "how long to wait for a held lock or a free permit")
	grace := durationFlag(f.fs, "grace", 10*time.Second, "how long the command may take to stop after SIGTERM; clipped to fit the TTL")
	t, code, ok := c.parse(f, args)
	if !ok {
		return runOptions{}, code, false
	}
	o = runOptions{t: t, owner: *owner, ttl: *ttl, wait: *wait, grace: *grace, argv: f.fs.Args()}
	if len(o.argv) == 0 {
		fmt.Fprintln(c.stderr, "leasegate: run needs a command after --")
		f.usage(false)
		return runOptions{}, ExitUsage, false
	}
	if !c.fitTimes(&o, isSet(f.fs, "grace")) {
		return runOptions{}, ExitUsage, false
	}
	return o, 0, true
}

// fitTimes checks o.ttl and o.grace (graceSet: given on the command line) and sets o.margin; it
// clips a grace that leaves renewals too little time, saying so when it was given. It reports
// false after printing why the flags cannot do.
func (c *command) fitTimes(o *runOptions, graceSet bool) bool {
	if o.ttl < 300*time.Millisecond {
		fmt.Fprintln(c.stderr, "leasegate: --ttl must be at least 300ms")
		return false
	}
	o.margin = safetyMargin(o.ttl)
	if graceSet && o.grace+o.margin >= o.ttl {
		fmt.Fprintf(c.stderr, "leasegate: --grace %v does not fit in --ttl %v: the command must be gone %v before the lease can lapse\n", o.grace, o.ttl, o.margin)
		return false
	}
	// Stopping starts grace + margin before the lease can lapse; a grace of at most a third of the
	// TTL leaves the renewal due at ttl/3 and its retries a third of the TTL to succeed first.
	if o.grace > o.ttl/3 {
		if graceSet {
			fmt.Fprintf(c.stderr, "leasegate: --grace clipped to %v (a third of --ttl) so that renewals have time to succeed\n", o.ttl/3)
		}
		o.grace = o.ttl / 3
	}
	return true
}

// holdOnAny takes the hold: the first replica that answers grants it; any replica can renew or
// release it. (A multi-lock's acquire has no Idempotency-Key: should a replica have granted it and
// its answer been lost, that grant lapses with its TTL, unrenewed.) While it waits, a terminal's
// stderr shows its progress.
func (c *command) holdOnAny(ctx context.Context, o runOptions) (heldLease, error) {
	if o.wait > 0 {
		defer c.showProgress(ctx, o.t, o.owner)()
	}
	var (
		lease heldLease
		err   error
		key   = uuid.NewString() // one acquire, whichever replica answers
	)
	for _, gw := range c.gateways {
		lease, err = o.t.hold(ctx, gw, o.owner, o.ttl, o.wait, key)
		var p *leasegate.ProblemError
		if err == nil || errors.As(err, &p) && p.Status != 503 || ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, leasegate.ErrPermitsMismatch) {
		err = fmt.Errorf("%w, not --permits %d (the first to take a permit while nobody holds or waits sets the size)", err, o.t.permits)
	}
	return lease, err
}

// giveBack releases lease through the replicas in turn, within 5 s; a lease already lost is
// said so by Release, and is no error here.
func (c *command) giveBack(lease heldLease, t target) {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rerr error
	for _, gw := range c.gateways {
		_, rerr = lease.ReleaseVia(rctx, gw)
		if rerr == nil || errors.Is(rerr, leasegate.ErrLeaseGone) || rctx.Err() != nil {
			break
		}
	}
	if rerr != nil && !errors.Is(rerr, leasegate.ErrLeaseGone) {
		giving := "releasing the " + t.String()
		if t.election != "" {
			giving = "resigning from " + t.String()
		}
		fmt.Fprintf(c.stderr, "leasegate: %s: %v\n", giving, rerr)
	}
}

// supervise renews lease while cmd runs, passes this process's signals on to it, and stops it
// before the lease can lapse or once it is lost (see run); it returns run's exit code.
func (c *command) supervise(ctx context.Context, o runOptions, lease heldLease, cmd *exec.Cmd) int {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)

	// The lease must outlive a signal to this process for as long as the command runs.
	keepCtx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeeping()
	renewed := make(chan time.Time, 1) // the lease's new ValidUntil after each renewal
	lost := make(chan error, 1)        // a renewal answered 410
	go keepAlive(keepCtx, lease, c.gateways, o.ttl, o.margin, renewed, lost)

	grace, margin := o.grace, o.margin
	validUntil := lease.ValidUntil()
	termTimer := time.NewTimer(time.Until(validUntil.Add(-grace - margin)))
	killTimer := time.NewTimer(time.Until(validUntil.Add(-margin)))
	defer termTimer.Stop()
	defer killTimer.Stop()
	stopping := false // SIGTERM was sent because the lease is lost or about to lapse
	stop := func(why string) {
		if !stopping {
			stopping = true
			fmt.Fprintf(c.stderr, "leasegate: %s; stopping the command\n", why)
			signalGroup(cmd, syscall.SIGTERM)
		}
	}
	gone := false // the lease is lost for sure: SIGKILL after grace
	lose := func(err error) {
		stop(fmt.Sprintf("lost %s: %s", o.t.lease(), lossReason(err)))
		if !gone {
			gone = true
			stopKeeping() // nothing left to renew
			killTimer.Reset(min(grace, time.Until(validUntil.Add(-margin))))
		}
	}
	// extend takes a renewal's new ValidUntil and reports whether it moved the timers.
	extend := func(v time.Time) bool {
		if gone {
			return false // a renewal answered before the loss: it changes nothing now
		}
		validUntil = v
		if !stopping {
			termTimer.Reset(time.Until(validUntil.Add(-grace - margin)))
		}
		killTimer.Reset(time.Until(validUntil.Add(-margin)))
		return true
	}
	// renewedMeanwhile takes a renewal that answered while a timer fired, before this loop read it
	// (select picks at random among ready cases, and a busy machine runs this loop late), and
	// reports whether it moved the timers: the timer that fired is then out of date.
	renewedMeanwhile := func() bool {
		select {
		case v := <-renewed:
			return extend(v)
		default:
			return false
		}
	}
	leaseDone := lease.Done()
	for {
		select {
		case err := <-exited:
			stopKeeping()
			if stopping {
				return ExitLeaseLost
			}
			return exitCode(err)
		case sig := <-signals:
			signalGroup(cmd, sig.(syscall.Signal))
		case v := <-renewed:
			extend(v)
		case err := <-lost:
			lose(err)
		case <-leaseDone:
			leaseDone = nil // closed for good
			// Lost (a renewal's 410, or the events stream). A lease about to lapse is the timers'
			// business: they stop the command from the same ValidUntil.
			if err := lease.Err(); errors.Is(err, leasegate.ErrLeaseGone) {
				lose(err)
			}
		case <-termTimer.C:
			if renewedMeanwhile() {
				break
			}
			stop(fmt.Sprintf("no renewal of %s succeeded, and it lapses in %v", o.t.lease(), time.Until(validUntil).Round(time.Millisecond)))
		case <-killTimer.C:
			if renewedMeanwhile() {
				break
			}
			stop(fmt.Sprintf("%s is about to lapse", o.t.lease()))
			fmt.Fprintf(c.stderr, "leasegate: the command is still running %v before %s can lapse; killing it\n", margin, o.t.lease())
			signalGroup(cmd, syscall.SIGKILL)
		}
	}
}

// leaseEnv is what the command learns of its lease: LEASEGATE_LOCK and LEASEGATE_MODE, or
// LEASEGATE_SEMAPHORE; and LEASEGATE_TOKEN and LEASEGATE_FENCE. For a multi-lock:
// LEASEGATE_MULTILOCK (its id), LEASEGATE_LOCKS (its members in name order, separated by spaces),
// LEASEGATE_FENCES (NAME=FENCE for each, likewise), LEASEGATE_MODE and LEASEGATE_TOKEN. For an
// election's lead (elect): LEASEGATE_ELECTION, LEASEGATE_VALUE, LEASEGATE_TOKEN and LEASEGATE_FENCE.
func leaseEnv(t target, lease heldLease) []string {
	if l, ok := lease.(*leasegate.Lead); ok {
		return []string{"LEASEGATE_ELECTION=" + l.Lock, "LEASEGATE_VALUE=" + l.Value(),
			"LEASEGATE_TOKEN=" + l.Token, "LEASEGATE_FENCE=" + strconv.FormatInt(l.Fence, 10)}
	}
	if m, ok := lease.(*leasegate.MultiLease); ok {
		locks := make([]string, len(m.Members))
		fences := make([]string, len(m.Members))
		for i, member := range m.Members {
			locks[i], fences[i] = member.Lock, member.Lock+"="+strconv.FormatInt(member.Fence, 10)
		}
		return []string{"LEASEGATE_MULTILOCK=" + m.ID, "LEASEGATE_LOCKS=" + strings.Join(locks, " "),
			"LEASEGATE_FENCES=" + strings.Join(fences, " "), "LEASEGATE_MODE=" + string(m.Mode), "LEASEGATE_TOKEN=" + m.Token}
	}
	l := lease.(*leasegate.Lease)
	env := []string{"LEASEGATE_TOKEN=" + l.Token, "LEASEGATE_FENCE=" + strconv.FormatInt(l.Fence, 10)}
	if t.semaphore != "" {
		return append(env, "LEASEGATE_SEMAPHORE="+l.Lock)
	}
	return append(env, "LEASEGATE_LOCK="+l.Lock, "LEASEGATE_MODE="+string(l.Mode()))
}

// safetyMargin is how long before its lease can lapse a command must be gone: a tenth of the TTL,
// between 50 ms and 1 s (scheduling, signal delivery and clock-rate slack).
func safetyMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

// keepAlive renews lease every ttl/3 until ctx ends, sending each new ValidUntil on renewed. A
// renewal is due a third of the TTL after the request that set the lease's ValidUntil was sent
// (renewalDue). A renewal that fails is retried every retry, through the next of gateways each
// time: the lease is still ours until it lapses, and any success before then keeps the command
// running. A renewal answered 410 ends it with the error on lost.
func keepAlive(ctx context.Context, lease heldLease, gateways []*leasegate.Gateway, ttl, retry time.Duration, renewed chan<- time.Time, lost chan<- error) {
	next, via := renewalDue(lease, ttl), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		// Each replica gets its share of the third of the TTL renewals have before stopping begins,
		// so a hung one cannot use up the time the others need.
		rctx, cancel := context.WithTimeout(ctx, ttl/3/time.Duration(len(gateways)))
		err := lease.RenewVia(rctx, gateways[via%len(gateways)], ttl)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			next = renewalDue(lease, ttl)
			select {
			case renewed <- lease.ValidUntil():
			case <-ctx.Done():
				return
			}
		case errors.Is(err, leasegate.ErrLeaseGone):
			lost <- err // buffered: run reads it at most once
			return
		default:
			// Try the next replica at once, and each replica again every retry.
			via++
			next = retry
			if via%len(gateways) != 0 {
				next = 0
			}
		}
	}
}

// renewalDue is how long until lease's next renewal is due: a third of ttl after the request that
// set its ValidUntil was sent, which is when the lease's TTL started counting. Counting from when
// the last answer arrived instead (or, for the first renewal, from when the command started) would
// let each answer's delay, and the command's start, eat into the time renewals have before
// stopping begins (ttl/3 - margin from when one is due: 117 ms for a 500 ms TTL). A renewal that
// succeeds answers within ttl/3 of when it was sent (its timeout), so the next one is never due
// before that answer.
func renewalDue(lease heldLease, ttl time.Duration) time.Duration {
	return time.Until(lease.ValidUntil().Add(ttl/3 - ttl))
}

// signalGroup signals the command's process group, or the command alone when it has none.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if ownGroup(cmd) {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
		return
	}
	_ = cmd.Process.Signal(sig)
}

// ownGroup reports whether cmd leads a process group of its own.
func ownGroup(cmd *exec.Cmd) bool {
	return cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid
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
