package leasegate

import (
	"context"
	"errors"
	"sync"
	"time"
)

// lifetime is what a Lease and a MultiLease share: when work under the lease must stop (Done,
// Context, Err), when the lease lapses at the earliest (ValidUntil), and the keep-alive that
// pushes that moment back. Both embed it, so its exported methods are theirs.
type lifetime struct {
	ctx  context.Context // ends when work must stop; its cause is Err
	stop context.CancelCauseFunc

	// mu guards the fields below and the embedding lease's own changing state (its grant, holds).
	mu sync.Mutex
	// ttl and validUntil are those of the hold that lapses first (see ValidUntil).
	ttl        time.Duration
	validUntil time.Time
	lapse      *time.Timer // stops the lease margin before validUntil; nil for watchdog leases
	keeping    bool        // KeepAlive's goroutine runs
	// extended tells KeepAlive's goroutine that validUntil or ttl may have moved (a Renew to a
	// shorter TTL brings the next renewal forward).
	extended chan struct{}
	// setting is held by the call that sets the lease's TTL (a renewal, a re-entry) from its send
	// to its answer (see setTTL).
	setting chan struct{}
	// targets is how many events streams the lease follows (0: not watched; see watch.go), and
	// open how many of them are open now.
	targets, open int
	watchers      sync.WaitGroup // the goroutines following them; Add only with mu held, before the end

	// releases is held for reading by each release in flight, so that a loss the gateway does not
	// explain waits for their answers (endUnlessReleased).
	releases sync.RWMutex
}

// start makes the lifetime's context; before the lease is shared.
func (l *lifetime) start() {
	l.ctx, l.stop = context.WithCancelCause(context.Background())
	l.extended = make(chan struct{}, 1)
	l.setting = make(chan struct{}, 1)
}

// setTTL runs call, which sets the lease's TTL (a renewal or a re-entry, with its retries), after
// any other such call of the lease has been answered. Two of them in flight at once could be
// applied by Redis in one order and answered in the other, and the lease would then count as
// valid for the TTL Redis no longer has (a keep-alive renewal answered after a shorter Renew by
// hand); one at a time, the latest answer is the TTL Redis has.
func (l *lifetime) setTTL(ctx context.Context, call func() error) error {
	select {
	case l.setting <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.setting }()
	return call()
}

// arm starts counting down to the lease's lapse (see Done). The gateway renews a watchdog lease:
// only a 410 or the release end it here.
func (l *lifetime) arm(watchdog bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !watchdog && l.lapse == nil {
		l.lapse = time.AfterFunc(l.untilStop(), func() { l.stop(ErrLeaseLapsing) })
	}
}

// extend records that the lease lapses at validUntil at the earliest, with TTL ttl, and moves the
// lapse timer to match; l.mu held or the lease not shared yet.
func (l *lifetime) extend(ttl time.Duration, validUntil time.Time) {
	l.ttl, l.validUntil = ttl, validUntil
	if l.ctx.Err() == nil && l.lapse != nil {
		l.lapse.Reset(l.untilStop())
	}
	select {
	case l.extended <- struct{}{}:
	default:
	}
}

// untilStop is how long until the lease counts as lost; l.mu held or the lease not shared yet.
func (l *lifetime) untilStop() time.Duration {
	return time.Until(l.validUntil.Add(-SafetyMargin(l.ttl)))
}

// ValidUntil is when the lease lapses at the earliest unless renewed: the TTL of its last grant,
// renewal or re-entry, counted on this process's monotonic clock from when that request was sent
// (not from when its answer arrived, which may be later). For a lease holding its lock both ways,
// that of the hold that lapses first; for a multi-lock, that of its members (renewed together).
func (l *lifetime) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Done is closed when work under the lease must stop (see Err): it is lost (a renewal, re-entry
// or release answered 410; or, for a watched lease, its events stream told of a force release or
// an expiry, within milliseconds), it would lapse before a renewal could succeed, or it was
// released.
func (l *lifetime) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when work under the lease must stop; context.Cause gives Err. Derive the
// contexts of the work the lease protects from it.
func (l *lifetime) Context() context.Context { return l.ctx }

// Err is nil while the lease may be used, then why not (EndReason sums it up): an error matching
// ErrLeaseGone (a call answered 410, or the events stream told of the loss: then a *LostError,
// matching ErrLeaseForced or ErrLeaseExpired as well when the gateway said why), ErrLeaseLapsing
// (margin before ValidUntil, no renewal succeeded) or ErrReleased (its own release: never a
// loss). The first reason stays.
func (l *lifetime) Err() error { return context.Cause(l.ctx) }

// SafetyMargin is how long before ValidUntil a lease counts as lost: a tenth of its TTL, between
// 50 ms and 1 s (scheduling, network and clock-rate slack).
func SafetyMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

// endIfGone ends the lease when err says it is gone (410).
func (l *lifetime) endIfGone(err error) {
	if errors.Is(err, ErrLeaseGone) {
		l.end(err)
	}
}

// end stops the lease's work with cause.
func (l *lifetime) end(cause error) {
	l.mu.Lock()
	if l.lapse != nil {
		l.lapse.Stop()
	}
	l.mu.Unlock()
	l.stop(cause)
}

// keepAlive starts the goroutine of KeepAlive, which calls renew (the lease's Renew keeping its
// TTL) every third of the TTL until the lease ends, and every SafetyMargin after a failure; it
// does nothing when that goroutine runs already or the lease has ended.
func (l *lifetime) keepAlive(renew func(ctx context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keeping || l.ctx.Err() != nil {
		return
	}
	l.keeping = true
	go l.renewEveryThird(renew)
}

func (l *lifetime) renewEveryThird(renew func(ctx context.Context) error) {
	// After a failure, the next try is due at retryAt, as long as validUntil stays failedAt's.
	var retryAt, failedAt time.Time
	for {
		l.mu.Lock()
		ttl, validUntil := l.ttl, l.validUntil
		l.mu.Unlock()
		// Due once a third of the TTL has passed since the latest grant, renewal or re-entry was
		// sent (validUntil - ttl), so that one made by hand counts, and one to a shorter TTL
		// brings the next renewal forward; news that moves neither (a release) changes nothing.
		due := validUntil.Add(ttl/3 - ttl)
		if !retryAt.IsZero() && validUntil.Equal(failedAt) {
			due = retryAt
		}
		t := time.NewTimer(time.Until(due))
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-l.extended: // the TTL or validUntil may have moved
			t.Stop()
			continue
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(l.ctx, ttl/3)
		err := renew(rctx)
		cancel()
		retryAt = time.Time{}
		if err != nil {
			l.mu.Lock()
			retryAt, failedAt = time.Now().Add(SafetyMargin(ttl)), l.validUntil
			l.mu.Unlock()
		}
	}
}
