package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// acquire, release, renew and inspect print the gateway's JSON answer (a grant, a release, a
// lock's, semaphore's or election's state, or a problem) and exit 0 on success. A multi-lock is acquired by
// its members' names (--lock repeated), renewed and released by its id (--multilock).

func (c *command) acquire(ctx context.Context, args []string) int {
	f := c.flags("acquire", "(--lock NAME [--lock NAME...] [--shared] | --semaphore NAME --permits N) [--owner O] [--ttl D] [--wait D] [--watchdog] [--max-hold D] [--token T]")
	owner := f.fs.String("owner", c.defaultOwner(), "who holds the lock or permit")
	ttl := durationFlag(f.fs, "ttl", 30*time.Second, "lease time to live")
	wait := durationFlag(f.fs, "wait", 0, "how long to wait for a held lock or a free permit (long-polls of at most 30s, keeping the place in line)")
	watchdog := f.fs.Bool("watchdog", false, "let the gateway renew the lease until released")
	maxHold := durationFlag(f.fs, "max-hold", 0, "watchdog: stop renewing this long after the grant")
	token := f.fs.String("token", "", "re-enter the lease of this token (one --lock, or --semaphore)")
	t, code, ok := c.parse(f, args)
	if !ok {
		return code
	}
	if t.locks != nil && *token != "" {
		fmt.Fprintln(c.stderr, "leasegate: --token re-enters one lock's lease: a multi-lock cannot be re-entered")
		f.usage(false)
		return ExitUsage
	}
	stopProgress := func() {}
	if *wait > 0 && *token == "" {
		stopProgress = c.showProgress(ctx, t, *owner)
	}
	start := time.Now()
	a, err := c.take(ctx, t, acquireOptions{owner: *owner, ttl: *ttl, watchdog: *watchdog, maxHold: *maxHold, token: *token}, *wait)
	stopProgress()
	if err != nil {
		return c.fail(err)
	}
	code = c.print(a)
	if code == ExitNotAcquired && *wait > 0 {
		c.notGranted(ctx, t, *owner, time.Since(start), a.problem) // the JSON on stdout may go to a pipe
	}
	return code
}

// maxWaitPerRequest bounds one long-poll, below the gateway's default LEASEGATE_MAX_WAIT (60s)
// and common HTTP client timeouts.
const maxWaitPerRequest = 30 * time.Second

// take acquires t, waiting up to wait: a wait longer than one long-poll goes on with the next, at
// the same place in line (its queue ticket; a multi-lock's 409 without one asks again), and a
// replica that is shutting down (or full) is retried within the wait; a re-entry (o.token) never
// waits. Every request carries one Idempotency-Key, so no retry can take a second lease (a
// multi-lock's carry none: see call). take returns the last answer, or a transport error.
func (c *command) take(ctx context.Context, t target, o acquireOptions, wait time.Duration) (*answer, error) {
	o.key = uuid.NewString() // one logical acquire, however many long-polls and retries
	deadline := time.Now().Add(wait)
	for {
		if wait > 0 {
			o.wait = max(min(time.Until(deadline), maxWaitPerRequest), time.Millisecond)
		}
		a, err := c.call(ctx, t.keyed(), func(gw *leasegate.Gateway) (*answer, error) { return t.acquire(ctx, gw, o) })
		if err != nil {
			return nil, err
		}
		if p := a.problem; p != nil && wait > 0 && o.token == "" && time.Until(deadline) > 0 {
			if p.Status == http.StatusConflict && p.QueueTicket != nil {
				o.ticket = p.QueueTicket
				continue
			}
			if t.locks != nil && errors.Is(p, leasegate.ErrHeld) { // no place to keep: start over
				o.ticket = nil
				continue
			}
			if p.Status == http.StatusServiceUnavailable {
				if p.QueueTicket != nil {
					o.ticket = p.QueueTicket
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(min(time.Second, time.Until(deadline))):
				}
				continue
			}
		}
		return a, nil
	}
}

func (c *command) release(ctx context.Context, args []string) int {
	f := c.flags("release", "(--lock NAME [--mode exclusive|shared] | --semaphore NAME | --multilock ID) --token T")
	token := f.fs.String("token", "", "lease token (required)")
	t, code, ok := c.parse(f, args)
	if !ok {
		return code
	}
	key := uuid.NewString()
	a, err := c.call(ctx, t.keyed(), func(gw *leasegate.Gateway) (*answer, error) { return t.release(ctx, gw, *token, key) })
	if err != nil {
		return c.fail(err)
	}
	return c.print(a)
}

func (c *command) renew(ctx context.Context, args []string) int {
	f := c.flags("renew", "(--lock NAME | --semaphore NAME | --multilock ID) --token T [--ttl D]")
	token := f.fs.String("token", "", "lease token (required)")
	ttl := durationFlag(f.fs, "ttl", 0, "new time to live (default: the lease's own)")
	t, code, ok := c.parse(f, args)
	if !ok {
		return code
	}
	key := uuid.NewString()
	// A second renewal changes nothing, key or no key.
	a, err := c.call(ctx, true, func(gw *leasegate.Gateway) (*answer, error) { return t.renew(ctx, gw, *token, *ttl, key) })
	if err != nil {
		return c.fail(err)
	}
	return c.print(a)
}

func (c *command) inspect(ctx context.Context, args []string) int {
	f := c.flags("inspect", "(--lock NAME | --semaphore NAME | --election NAME) [--token T]")
	token := f.fs.String("token", "", "also tell whether this token's lease holds the lock or a permit (not with --election)")
	t, code, ok := c.parse(f, args)
	if !ok {
		return code
	}
	if t.election != "" && *token != "" {
		fmt.Fprintln(c.stderr, "leasegate: --token goes with --lock or --semaphore: an election's state names its leader's fence instead")
		f.usage(false)
		return ExitUsage
	}
	a, err := t.inspect(ctx, c.gateways[0], *token)
	if err != nil {
		return c.fail(err)
	}
	return c.print(a)
}

// call makes one call through the --server replicas, retrying it through the next after a
// transport error (the answer may have been lost) or a 503, up to three tries 50 and 100 ms
// apart. Callers send one Idempotency-Key on all tries, so a retry cannot apply twice; a call that
// has none and would change something if applied twice (resend false: a multi-lock's acquire or
// release) is retried after a transport error only when it cannot have reached the gateway
// (connection refused).
func (c *command) call(ctx context.Context, resend bool, do func(gw *leasegate.Gateway) (*answer, error)) (*answer, error) {
	var (
		a   *answer
		err error
	)
	for try := range 3 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return a, err
			case <-time.After(time.Duration(try) * 50 * time.Millisecond):
			}
		}
		a, err = do(c.gateways[try%len(c.gateways)])
		switch {
		case err == nil && a.status != http.StatusServiceUnavailable, ctx.Err() != nil:
			return a, err
		case err != nil && !resend && !unsent(err): // it may have reached the gateway
			return a, err
		}
	}
	return a, err
}

// print writes the answer's body (and, for a 401 or 403, says why on stderr too); the exit code
// is 0 for 2xx, ExitNotAcquired when the lock stayed held or every permit taken, else ExitFailed.
func (c *command) print(a *answer) int {
	c.stdout.Write(a.body)
	if p := a.problem; p != nil && (errors.Is(p, leasegate.ErrUnauthenticated) || errors.Is(p, leasegate.ErrForbidden)) {
		fmt.Fprintln(c.stderr, "leasegate:", c.explain(p)) // the JSON on stdout may go to a pipe
	}
	switch {
	case a.status < 300:
		return 0
	case a.problem != nil && notAcquired(a.problem):
		return ExitNotAcquired
	}
	return ExitFailed
}

// unsent reports whether err says that a request never reached the gateway (its connection was
// refused), so that sending it again cannot apply it twice.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func ms(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	v := d.Milliseconds()
	return &v
}
