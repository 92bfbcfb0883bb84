package leasegate

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Lease is a held lock. Its identity (Lock, Owner, Token, Fence) never changes; the rest follows
// its latest grant, renewal, re-entry and release. A Lease is safe for concurrent use: work may
// read it while KeepAlive renews it.
//
// Done, Context and Err say when work under the lease must stop: when a renewal answers that the
// lease is gone, when it is released, or a safety margin before it can lapse (ValidUntil) with no
// renewal having pushed that back. Call KeepAlive to have it renewed for you. (A watchdog lease is
// renewed by the gateway, so only a 410 or its release end it here.)
type Lease struct {
	Lock, Owner, Token string
	Fence              int64
	Watchdog           bool // the gateway renews it (see LockOptions.Watchdog)

	client *Gateway
	ctx    context.Context // ends when work must stop; its cause is Err
	stop   context.CancelCauseFunc

	mu         sync.Mutex
	grant      Grant
	validUntil time.Time
	lapse      *time.Timer // stops the lease margin before validUntil; nil for watchdog leases
	keeping    bool        // KeepAlive's goroutine runs
}

func newLease(c *Gateway, g *Grant, sent time.Time) *Lease {
	l := &Lease{Lock: g.Lock, Owner: g.Owner, Token: g.Token, Fence: g.Fence, Watchdog: g.Watchdog, client: c, grant: *g}
	l.ctx, l.stop = context.WithCancelCause(context.Background())
	l.validUntil = validUntil(sent, g)
	return l
}

// arm starts counting down to the lease's lapse (see Done). The gateway renews a watchdog lease:
// only a 410 or the release end it here.
func (l *Lease) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.Watchdog && l.lapse == nil {
		l.lapse = time.AfterFunc(l.untilStop(), func() { l.stop(ErrLeaseLapsing) })
	}
}

// Grant returns the latest grant body (TTL, expiry, holds).
func (l *Lease) Grant() Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant
}

// Holds returns how many holds the lease has: 1 after the grant, +1 per re-entry, -1 per release.
func (l *Lease) Holds() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant.Holds
}

// ValidUntil is when the lease lapses at the earliest unless renewed: the TTL of its last grant,
// renewal or re-entry, counted on this process's monotonic clock from when that request was sent
// (not from when its answer arrived, which may be later).
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Done is closed when work under the lease must stop (see Err).
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when work under the lease must stop; context.Cause gives Err. Derive the
// contexts of the work the lease protects from it.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease may be used, then why not: an error matching ErrLeaseGone (a renewal
// answered 410), ErrLeaseLapsing (margin before ValidUntil, no renewal succeeded) or ErrReleased.
func (l *Lease) Err() error { return context.Cause(l.ctx) }

// SafetyMargin is how long before ValidUntil a lease counts as lost: a tenth of its TTL, between
// 50 ms and 1 s (scheduling, network and clock-rate slack).
func SafetyMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

func (l *Lease) ttl() time.Duration { return time.Duration(l.grant.TtlMs) * time.Millisecond }

// untilStop is how long until the lease counts as lost; l.mu held or l not shared yet.
func (l *Lease) untilStop() time.Duration {
	return time.Until(l.validUntil.Add(-SafetyMargin(l.ttl())))
}

// update records a new grant body, whose request was sent at sent.
func (l *Lease) update(g *Grant, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grant, l.validUntil = *g, validUntil(sent, g)
	if l.ctx.Err() == nil && l.lapse != nil {
		l.lapse.Reset(l.untilStop())
	}
}

// validUntil is sent + the grant's TTL, keeping sent's monotonic clock reading.
func validUntil(sent time.Time, g *Grant) time.Time {
	return sent.Add(time.Duration(g.TtlMs) * time.Millisecond)
}

// Renew sets the lease's TTL (0: keep its own). It returns an error matching ErrLeaseGone once the
// lease is lost (and ends its Context). A lost answer is retried with the same Idempotency-Key.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	return l.RenewVia(ctx, l.client, ttl)
}

// RenewVia is Renew through gw, another replica of the same deployment (any replica with the
// same token secret can renew any lease): for when the one that granted the lease is unreachable.
func (l *Lease) RenewVia(ctx context.Context, gw *Gateway, ttl time.Duration) error {
	var sent time.Time
	var resp *RenewLockResponse
	err := l.retry(ctx, func(key *string) (err error) {
		sent = time.Now()
		resp, err = gw.API.RenewLockWithResponse(ctx, l.Lock, &RenewLockParams{LeaseToken: l.Token, IdempotencyKey: key}, RenewRequest{TtlMs: millis(ttl)})
		if err == nil && resp.JSON200 == nil {
			err = problem(resp.HTTPResponse, resp.Body)
		}
		return err
	})
	if err != nil {
		return err
	}
	l.update(resp.JSON200, sent)
	return nil
}

// Reenter takes the lock once more with the same lease (reentrant), resetting its TTL to ttl.
func (l *Lease) Reenter(ctx context.Context, ttl time.Duration) error {
	var sent time.Time
	var resp *AcquireLockResponse
	err := l.retry(ctx, func(key *string) (err error) {
		sent = time.Now()
		resp, err = l.client.API.AcquireLockWithResponse(ctx, l.Lock, &AcquireLockParams{LeaseToken: &l.Token, IdempotencyKey: key},
			AcquireRequest{Owner: l.Owner, TtlMs: millis(ttl)})
		if err == nil && resp.JSON200 == nil {
			err = problem(resp.HTTPResponse, resp.Body)
		}
		return err
	})
	if err != nil {
		return err
	}
	l.update(resp.JSON200, sent)
	return nil
}

// Release gives back one hold; released reports whether the lock is now free of this lease, which
// then ends its keep-alive and its Context (ErrReleased). A lost answer is retried with the same
// Idempotency-Key, so a retry never gives back a second hold.
func (l *Lease) Release(ctx context.Context) (released bool, err error) {
	return l.ReleaseVia(ctx, l.client)
}

// ReleaseVia is Release through gw, another replica of the same deployment.
func (l *Lease) ReleaseVia(ctx context.Context, gw *Gateway) (released bool, err error) {
	var resp *ReleaseLockResponse
	err = l.retry(ctx, func(key *string) (err error) {
		resp, err = gw.API.ReleaseLockWithResponse(ctx, l.Lock, &ReleaseLockParams{LeaseToken: l.Token, IdempotencyKey: key})
		if err == nil && resp.JSON200 == nil {
			err = problem(resp.HTTPResponse, resp.Body)
		}
		return err
	})
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	l.grant.Holds = resp.JSON200.Holds
	l.mu.Unlock()
	if resp.JSON200.Released {
		l.end(ErrReleased)
	}
	return resp.JSON200.Released, nil
}

// end stops the lease's work with cause.
func (l *Lease) end(cause error) {
	l.mu.Lock()
	if l.lapse != nil {
		l.lapse.Stop()
	}
	l.mu.Unlock()
	l.stop(cause)
}

// retry runs one logical call with a fresh Idempotency-Key, retrying it (same key) after a lost
// answer or a 503, up to 3 tries within ctx, 50 and 100 ms apart. A 410 ends the lease's Context.
func (l *Lease) retry(ctx context.Context, call func(key *string) error) error {
	key := newKey()
	var err error
	for try := range 3 {
		if try > 0 {
			if serr := sleep(ctx, time.Duration(try)*50*time.Millisecond); serr != nil {
				return err
			}
		}
		err = call(&key)
		if errors.Is(err, ErrLeaseGone) {
			l.end(err)
		}
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

func newKey() string { return uuid.NewString() }

// KeepAlive renews the lease every third of its TTL until it is released or lost, retrying a failed
// renewal every SafetyMargin: any success before the margin keeps the lease (and Done open). It
// returns at once; calling it again does nothing.
func (l *Lease) KeepAlive() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keeping || l.ctx.Err() != nil {
		return
	}
	l.keeping = true
	go l.keepAlive()
}

func (l *Lease) keepAlive() {
	l.mu.Lock()
	next := l.ttl() / 3
	l.mu.Unlock()
	for {
		t := time.NewTimer(next)
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		l.mu.Lock()
		ttl := l.ttl() // a Renew or Reenter may have changed it
		l.mu.Unlock()
		rctx, cancel := context.WithTimeout(l.ctx, ttl/3)
		err := l.Renew(rctx, 0)
		cancel()
		if err == nil {
			next = ttl / 3
		} else {
			next = SafetyMargin(ttl)
		}
	}
}
