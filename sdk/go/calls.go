package leasegate

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// calls are the gateway endpoints behind a Lease: a lock's (lockCalls), a semaphore's
// (semaphoreCalls) or an election's (*electionCalls). Each method sends one request; an answer other than the expected 2xx is
// returned as a *ProblemError, a transport failure as it is.
type calls interface {
	// acquire asks for a new lease on name, long-polling up to poll (0: try once) with ticket
	// (waiting requests only); it also returns the HTTP answer, nil when none arrived.
	acquire(ctx context.Context, gw *Gateway, name string, r *acquisition, poll time.Duration, ticket *string) (*answer, *http.Response, error)
	// reenter takes one more hold of mode with l's token, its TTL reset to ttl (0: the server's default).
	reenter(ctx context.Context, gw *Gateway, l *Lease, mode Mode, ttl time.Duration, key *string) (*answer, error)
	// renew sets the TTL of every hold of l to ttl (0: each keeps its own).
	renew(ctx context.Context, gw *Gateway, l *Lease, ttl time.Duration, key *string) (*answer, error)
	// release gives back one hold of l: of mode, or ("") the one the server picks.
	release(ctx context.Context, gw *Gateway, l *Lease, mode Mode, key *string) (*Release, error)
	// watch opens the events stream of name, with token when not "" (the answer's body is left
	// unread: the caller closes it).
	watch(ctx context.Context, gw *Gateway, name, token string) (*http.Response, error)
}

// answer is a grant, re-entry or renewal body in one form for locks and semaphores: a semaphore's
// has Lock set to the semaphore's name, Mode ModeShared, and its size and permits in use.
type answer struct {
	Grant
	Permits, Used int64 // a semaphore's; 0 for a lock
}

// acquisition is what Lock and AcquireSemaphore ask for.
type acquisition struct {
	owner    string
	mode     Mode  // a lock's; "" is exclusive
	permits  int64 // a semaphore's size
	ttl      time.Duration
	watchdog bool
	maxHold  time.Duration
	wait     time.Duration // in all, across long-polls
	// perRequest bounds each long-poll (default 30 s); key is the Idempotency-Key of them all
	// (default: a fresh one).
	perRequest time.Duration
	key        string
	watch      WatchLoss
}

// acquire is Lock's and AcquireSemaphore's wait: it asks kind's endpoint for name, splitting r.wait
// into long-polls of at most r.perRequest, each presenting the queue ticket of the 409 (or 503
// shutting-down) that ended the one before, so the split wait keeps its place in line. A 503 is
// retried within the wait, an unreachable gateway twice; all requests carry one Idempotency-Key.
// It returns the last lock-held or semaphore-full problem when the wait ran out, any other
// problem at once, or ctx's error.
func (c *Gateway) acquire(ctx context.Context, kind calls, name string, r acquisition) (*Lease, error) {
	deadline := time.Now().Add(r.wait)
	if r.perRequest <= 0 {
		r.perRequest = 30 * time.Second
	}
	if r.key == "" {
		r.key = newKey()
	}
	var ticket *string
	unreachable := 0
	for {
		sent := time.Now()
		a, resp, err := kind.acquire(ctx, c, name, &r, min(time.Until(deadline), r.perRequest), ticket)
		if a != nil {
			lease := newLease(c, kind, a, sent)
			lease.watchLoss = r.watch
			// The lease's TTL started when it was granted, after the request was sent; after a long
			// wait, counting from the send would make it lapse (on paper) at once. Renew it now to
			// count from a request sent after the grant.
			if time.Since(sent) > SafetyMargin(lease.ttl) && !a.Watchdog {
				_ = lease.Renew(ctx, 0) // on failure the earlier, conservative bound stands
			}
			lease.arm(a.Watchdog)
			if r.watch == WatchAlways || r.watch == WatchKept && a.Watchdog {
				lease.Watch()
			}
			return lease, nil
		}
		if resp == nil { // no answer
			if unreachable++; unreachable <= 2 && ctx.Err() == nil && retryable(err) {
				if err := sleep(ctx, 100*time.Millisecond); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		var p *ProblemError
		if !errors.As(err, &p) || time.Until(deadline) <= 0 {
			return nil, err
		}
		switch {
		case errors.Is(p, ErrHeld), errors.Is(p, ErrSemaphoreFull), errors.Is(p, ErrLed):
			ticket = p.QueueTicket
		case p.Status == http.StatusServiceUnavailable:
			if p.QueueTicket != nil {
				ticket = p.QueueTicket
			}
			if err := sleep(ctx, min(retryPause(resp), time.Until(deadline))); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
}

// retry runs one logical call with a fresh Idempotency-Key, retrying it (same key) after a lost
// answer or a 503, as resend does.
func retry(ctx context.Context, call func(key *string) error) error {
	key := newKey()
	return resend(ctx, func() error { return call(&key) })
}

// resend runs call, and again after a lost answer or a 503, up to 3 tries within ctx, 50 and 100
// ms apart. Only for calls that cannot apply twice: keyed ones (retry), or ones whose second
// application changes nothing.
func resend(ctx context.Context, call func() error) error {
	var err error
	for try := range 3 {
		if try > 0 {
			if serr := sleep(ctx, time.Duration(try)*50*time.Millisecond); serr != nil {
				return err
			}
		}
		err = call()
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// retryable reports whether err may be a lost answer or a passing outage worth retrying: a
// transport error (not the caller's context) or a 503.
func retryable(err error) bool {
	var p *ProblemError
	if errors.As(err, &p) {
		return p.Status == http.StatusServiceUnavailable
	}
	var ne net.Error
	return err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		(errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
}

// unsent reports whether err says that a request never reached the gateway (its connection was
// refused), so that sending it again cannot apply it twice, key or no key.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func newKey() string { return uuid.NewString() }

// retryPause is how long to wait before retrying a 503: its Retry-After, at most a second.
func retryPause(resp *http.Response) time.Duration {
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, time.Second)
	}
	return time.Second
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func millis(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
