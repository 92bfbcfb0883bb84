package lockcore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// tryOnce tries once: the lock goes to the new lease lease if it is free and nobody is queued. The
// grant is not finished yet (see finishGrant).
func (s *Service) tryOnce(ctx context.Context, req AcquireRequest, lease string) (g Grant, err error) {
	err = s.tryInto(ctx, &req, lease, &g)
	return g, err
}

// tryInto is tryOnce into *g (a zero Grant), which stays zero on failure. It works on pointers and
// is not inlined, so that its frame and those under it stay small: a waiting acquire's frames on
// the way stay on its stack while it waits, and an acquire whose deepest frames take its
// connection's goroutine past 8 KB of stack has that stack copied to a larger one again after
// every GC, which shrinks it (measured with go tool pprof: runtime.copystack under runAcquire).
//
//go:noinline
func (s *Service) tryInto(ctx context.Context, req *AcquireRequest, lease string, g *Grant) error {
	start := time.Now()
	r, err := s.runAcquire(ctx, req, lease, false, 0, "")
	if err != nil {
		// An unacknowledged grant is given back, unless the request carries an Idempotency-Key:
		// then its retry replays it (and waits for the replicas again), as finishGrant keeps a grant
		// whose caller left.
		if notAcked(err) && r.status == acquireGranted && req.IdempotencyKey == "" {
			s.giveBackUnacked(ctx, Lease{Lock: req.Lock, Kind: req.Kind, ID: lease}, req.mode())
		}
		return err
	}
	ttl := req.TTL
	switch r.status {
	case acquireHeld:
		return &HeldError{Lock: req.Lock, Kind: req.Kind, RetryAfter: r.pttl}
	case acquireReplayed: // the first request's lease, with what it has left
		lease, ttl = r.lease, r.pttl
	case acquireReplayedLost:
		return fmt.Errorf("%w: %s %q: the lease the first request with this Idempotency-Key was granted", ErrLeaseLost, req.Kind, req.Lock)
	}
	s.newGrant(g, req, lease, ttl, r, start)
	if r.status == acquireGranted && !s.fresh(*g) {
		err := s.tooLate(ctx, req, g)
		*g = Grant{}
		return err
	}
	return nil
}

// finishInto is finishGrant on *g, not inlined for the same reason as tryInto.
//
//go:noinline
func (s *Service) finishInto(ctx context.Context, req *AcquireRequest, g *Grant, giveBack giveBackFunc) (err error) {
	*g, err = s.finishGrant(ctx, *req, *g, giveBack)
	return err
}

// giveBackFunc gives back a grant its caller cannot keep: (*Service).giveBack for a lock or a
// semaphore, (*Service).resignBack for an election's leader. A method expression, not a method
// value: passing it allocates nothing.
type giveBackFunc func(s *Service, ctx context.Context, g Grant)

// finishGrant finishes a grant: a watchdog lease is put on the renewal schedule, a lease without one
// joins the long-hold report, and g is given back (giveBack) when ctx ended meanwhile (the caller
// went away; ctx's error is returned) unless the request carries an Idempotency-Key: its retry
// collects the grant (giving it back would answer that retry 410, or hand it a lease about to be
// released).
func (s *Service) finishGrant(ctx context.Context, req AcquireRequest, g Grant, giveBack giveBackFunc) (Grant, error) {
	if g.Watchdog {
		if err := s.watchdog.schedule(ctx, g.Lease, g.TTL, !g.Reentered); err != nil {
			giveBack(s, ctx, g) // a watchdog lease nobody would renew is worse than none
			return Grant{}, err
		}
	} else { // a long TTL, or a late re-entry (see long_holds.go)
		s.ledgers.long.track(ctx, g.Lease, g.TTL)
	}
	if err := ctx.Err(); err != nil {
		if req.IdempotencyKey == "" {
			giveBack(s, ctx, g)
		}
		return Grant{}, err
	}
	return g, nil
}

// fresh reports whether grant g may still be answered: no more than half its TTL, or freshLag if
// that is longer, has passed since the call that granted it was sent (ExpiresAt counts from
// then). A grant that Redis or its replicas answered later is not answered (docs/api.md, "A grant
// is answered fresh"): a waiter confirms it again, which sets its TTL anew; an acquire that does
// not wait gives it back and answers ErrUnavailable. freshLag keeps short TTLs usable at all on a
// loaded machine (a TTL of a few ms, as Redisson's own tests use, is half gone after one round
// trip): their grants are answered unless something delayed them more than that.
func (s *Service) fresh(g Grant) bool {
	left := time.Until(g.ExpiresAt)
	return left >= g.TTL/2 || g.TTL-left <= freshLag
}

// freshLag: see fresh.
const freshLag = 500 * time.Millisecond

// tooLate gives back grant g of req, answered too late to be of use (see fresh), and says so. A
// request with an Idempotency-Key keeps it for its retry, which replays it with what it has left.
func (s *Service) tooLate(ctx context.Context, req *AcquireRequest, g *Grant) error {
	if req.IdempotencyKey == "" {
		s.giveBack(ctx, *g)
	}
	return fmt.Errorf("%w: Redis granted %s %q too late to answer with it (%v of its %v TTL left)",
		ErrUnavailable, req.Kind, req.Lock, max(time.Until(g.ExpiresAt), 0).Round(time.Millisecond), g.TTL)
}

// newGrant sets *g to the grant of lease, for ttl, that reply r (to a call sent at start) made to req.
func (s *Service) newGrant(g *Grant, req *AcquireRequest, lease string, ttl time.Duration, r acquireReply, start time.Time) {
	l := Lease{Lock: req.Lock, Kind: req.Kind, Owner: req.Owner, ID: lease, Fence: r.fence, Principal: req.Principal}
	*g = Grant{Lease: l, Mode: req.mode(), Token: s.tokens.Mint(l), TTL: ttl, ExpiresAt: start.Add(s.dep.validity(ttl)), Holds: 1,
		Watchdog: req.Watchdog, Used: r.used}
	if req.Kind == KindSemaphore {
		g.Permits = req.Permits
	}
}

// runAcquire runs acquire.lua, trying once or (waiting) queueing. A waiter queues at arrival (µs, Redis
// time) when it is not 0, else at the place queue ticket ticketID keeps (taken once), else now.
// With replica acks, a grant (or a replayed one) the replicas did not acknowledge is returned
// with a *notAckedError; any other answer needs no acknowledgement and is returned as it is.
func (s *Service) runAcquire(ctx context.Context, req *AcquireRequest, lease string, waiting bool, arrival int64, ticketID string) (acquireReply, error) {
	reply, err := s.dep.run(ctx, s.acquireCall(req, lease, waiting, arrival, ticketID))
	if err != nil && !notAcked(err) {
		return acquireReply{}, err
	}
	r, derr := decodeAcquire(req.Lock, reply)
	if derr != nil {
		return acquireReply{}, derr
	}
	if err != nil && (r.status == acquireGranted || r.status == acquireReplayed) {
		return r, err
	}
	return r, nil
}

// acquireCall is runAcquire's call of acquire.lua. Not inlined: the arguments it gathers take room
// in its frame, which is gone by the time the call runs (see tryInto).
//
//go:noinline
func (s *Service) acquireCall(req *AcquireRequest, lease string, waiting bool, arrival int64, ticketID string) call {
	a := acquireArgs{lease: lease, ttl: req.TTL, owner: req.Owner, watchdog: req.Watchdog, waiting: waiting,
		replica: s.waiters.replica, arrival: arrival, ticketID: ticketID, maxHold: req.MaxHold, idem: s.idem(req.IdempotencyKey).claiming(req.claim),
		mode: req.mode(), permits: req.Permits}
	return a.call(s.lockCall(req.ref()))
}

// notAcked reports whether err says the replicas did not acknowledge a write in time.
func notAcked(err error) bool {
	var na *notAckedError
	return errors.As(err, &na)
}

// giveBack gives back one hold of g, a grant its caller cannot keep, on a context of its own: the
// caller's may have ended.
func (s *Service) giveBack(ctx context.Context, g Grant) {
	if _, err := s.releaseLease(context.WithoutCancel(ctx), g.Lease, idemKey{}, g.Mode); err != nil && !errors.Is(err, ErrLeaseLost) {
		s.log.Warn("giving back a grant its caller cannot keep failed; it runs out with its TTL", g.Kind.String(), g.Lock, "err", err)
	}
}

// giveBackUnacked gives back the one hold of mode that a grant the replicas did not acknowledge
// gave l, so that a grant the client is told failed holds nothing, even on the old master. Only a
// reply that says a hold was taken is given back: a refusal took nothing, and giving it back would
// take a hold the lease had before.
func (s *Service) giveBackUnacked(ctx context.Context, l Lease, mode Mode) {
	if _, rerr := s.releaseLease(context.WithoutCancel(ctx), l, idemKey{}, mode); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
		s.log.Warn("giving back a grant the replicas did not acknowledge failed; it runs out with its TTL", l.Kind.String(), l.Lock, "err", rerr)
	}
}
