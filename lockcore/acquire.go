package lockcore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Acquire grants req.Lock to a new lease, or re-enters the lease req.Token names. With req.Wait
// set (and no token) it waits up to req.Wait in the lock's FIFO queue (see wait.go).
//
// It returns a *HeldError (ErrHeld) when another lease holds the lock, ErrLeaseLost when the
// re-entered lease no longer holds it, ErrInvalidToken, ErrInvalidTicket or ErrInvalid for a bad
// token, ticket or owner, ErrTooManyWaiters when this Service holds its cap of waiting requests,
// and ErrUnavailable when Redis does not answer or the Service closes during the wait. If ctx
// ends after Redis granted the lock, the grant is undone before returning ctx's error, so a
// client that went away holds nothing, unless the request carries an IdempotencyKey: then the
// grant is kept for the retry that collects it.
func (s *Service) Acquire(ctx context.Context, req AcquireRequest) (g Grant, err error) {
	err = s.acquire(ctx, &req, &g)
	return g, err
}

// acquire is Acquire on pointers. A waiting acquire blocks below it, on its caller's goroutine,
// whose stack keeps every frame on the way at its full size while it waits: the functions on that
// way (acquire, acquireAny, waitInto, waitTurn.await) keep their frames small, passing the request
// and the grant by pointer and leaving bulky work to callees (measured with go run ./bench -only
// waitmem: a stack that stays within 8 KB, instead of 16 KB, per waiting request).
func (s *Service) acquire(ctx context.Context, req *AcquireRequest, g *Grant) error {
	if err := s.offered(req.ref()); err != nil {
		return err
	}
	if req.Kind == KindElection {
		return errCampaignOnly(req.ref(), "campaign for it (Campaign) rather than acquire it")
	}
	if req.IdempotencyKey != "" {
		if err := s.claimAcquireKey(ctx, req); err != nil {
			return err
		}
	}
	err := s.acquireAny(ctx, req, g)
	s.observeAcquire(req.Kind.String(), g, err)
	return err
}

// claimAcquireKey claims req's Idempotency-Key for this request (see claimIdempotencyKey).
func (s *Service) claimAcquireKey(ctx context.Context, req *AcquireRequest) error {
	return s.claimIdempotencyKey(ctx, req.IdempotencyKey, req.fingerprint(req.Token), req.TTL)
}

// observeAcquire tells the observer how an acquire ended.
func (s *Service) observeAcquire(kind string, g *Grant, err error) {
	switch {
	case err != nil:
		s.observeRefusal(kind, err)
	case g.Reentered:
		s.obs.Granted(kind, g.Mode, GrantReentry, 0)
	case g.Waited > 0:
		s.obs.Granted(kind, g.Mode, GrantHandOff, g.Waited)
	default:
		s.obs.Granted(kind, g.Mode, GrantNew, 0)
	}
}

// acquireAny re-enters, waits or tries once, as req asks, and sets *g to the grant.
func (s *Service) acquireAny(ctx context.Context, req *AcquireRequest, g *Grant) error {
	if req.Token != "" {
		return s.reenter(ctx, req, g)
	}
	lease := uuid.NewString()
	if err := s.countHeld(ctx, req, lease); err != nil {
		return err
	}
	var err error
	if req.Wait > 0 {
		if err = s.waitInto(ctx, req, lease, g); err == nil {
			err = s.finishInto(ctx, req, g)
		}
	} else {
		err = s.tryInto(ctx, req, lease, g)
	}
	// Not granted, or a retry granted the first request's lease (counted by that request).
	if err != nil && !grantUnknown(err, req.IdempotencyKey) || err == nil && g.ID != lease {
		s.uncountHeld(ctx, req, lease)
	}
	return err
}

// reenter re-enters the lease req.Token names and sets *g to its grant.
func (s *Service) reenter(ctx context.Context, req *AcquireRequest, g *Grant) error {
	r, err := s.reenterLease(ctx, *req)
	if err != nil {
		return err
	}
	// Counted to its new TTL's end at least (a watchdog lease's count, to its max hold, is
	// never shortened).
	s.ledgers.held.extend(ctx, r.Principal, r.TTL+heldSlack, heldMember(req.ref(), r.ID))
	*g, err = s.finishGrant(ctx, *req, r)
	return err
}

// countHeld counts the new lease lease among its principal's holds (see held_quota.go).
func (s *Service) countHeld(ctx context.Context, req *AcquireRequest, lease string) error {
	return s.ledgers.held.count(ctx, req.Principal, req.HeldCap, heldSpan(req.TTL, req.Wait, req.Watchdog, req.MaxHold),
		heldMember(req.ref(), lease))
}

func (s *Service) uncountHeld(ctx context.Context, req *AcquireRequest, lease string) {
	s.ledgers.held.uncount(ctx, req.Principal, heldMember(req.ref(), lease))
}

// tryInto tries once (acquireNew) and settles the grant into *g.
func (s *Service) tryInto(ctx context.Context, req *AcquireRequest, lease string, g *Grant) error {
	r, err := s.acquireNew(ctx, *req, lease)
	if err == nil {
		*g, err = s.finishGrant(ctx, *req, r)
	}
	return err
}

// finishInto is finishGrant on *g. Not inlined: its copies of the request and the grant would
// take room in acquireAny's frame, which stays on the stack while it waits.
//
//go:noinline
func (s *Service) finishInto(ctx context.Context, req *AcquireRequest, g *Grant) (err error) {
	*g, err = s.finishGrant(ctx, *req, *g)
	return err
}

// finishGrant finishes a grant: a new watchdog lease is enrolled for renewal, and g is undone when ctx
// ended meanwhile (the caller went away; ctx's error is returned) unless the request carries an
// Idempotency-Key: its retry collects the grant (giving it back would answer that retry 410, or
// hand it a lease about to be released).
func (s *Service) finishGrant(ctx context.Context, req AcquireRequest, g Grant) (Grant, error) {
	if g.Watchdog && !g.Reentered {
		if err := s.watchdog.enroll(ctx, g.Lease, g.TTL); err != nil {
			s.undo(ctx, g) // a watchdog lease nobody would renew is worse than none
			return Grant{}, err
		}
	}
	if !g.Watchdog && s.ledgers.long != nil { // a long TTL, or a late re-entry (see long_holds.go)
		s.ledgers.long.track(ctx, g.Lease, g.TTL)
	}
	if err := ctx.Err(); err != nil {
		if req.IdempotencyKey == "" {
			s.undo(ctx, g)
		}
		return Grant{}, err
	}
	return g, nil
}

// acquireNew tries once: the lock goes to new lease lease if it is free and nobody is queued.
func (s *Service) acquireNew(ctx context.Context, req AcquireRequest, lease string) (Grant, error) {
	start := time.Now()
	r, err := s.runAcquire(ctx, req, lease, false, 0, "")
	if err != nil {
		// An unacknowledged grant is given back, unless the request carries an Idempotency-Key:
		// then its retry replays it (and waits for the replicas again), as finishGrant keeps a grant
		// whose caller left.
		if notAcked(err) && r.status == acquireGranted && req.IdempotencyKey == "" {
			s.undoUnacked(ctx, Lease{Lock: req.Lock, Kind: req.Kind, ID: lease}, req.mode())
		}
		return Grant{}, err
	}
	switch r.status {
	case acquireHeld:
		return Grant{}, &HeldError{Lock: req.Lock, Kind: req.Kind, RetryAfter: r.pttl}
	case acquireReplayed: // the first request's lease, with what it has left
		lease, req.TTL = r.lease, r.pttl
	case acquireReplayedLost:
		return Grant{}, fmt.Errorf("%w: %s %q: the lease the first request with this Idempotency-Key was granted", ErrLeaseLost, req.Kind, req.Lock)
	}
	return s.newGrant(req, lease, r, start), nil
}

func (s *Service) reenterLease(ctx context.Context, req AcquireRequest) (Grant, error) {
	l, err := s.tokens.Parse(req.Token, req.ref())
	if err != nil {
		return Grant{}, err
	}
	if l.Owner != req.Owner {
		return Grant{}, fmt.Errorf("%w: owner %q does not match the lease token's owner %q", ErrInvalid, req.Owner, l.Owner)
	}
	start := time.Now()
	a := reenterArgs{lease: l.ID, ttl: req.TTL, idem: s.idem(req.IdempotencyKey), mode: req.mode(), permits: req.Permits}
	reply, err := s.dep.run(ctx, a.call(s.lockCall(req.ref())))
	if err != nil && !notAcked(err) {
		return Grant{}, err
	}
	acked := err
	r, err := decodeReenter(req.Lock, reply)
	switch {
	case err != nil:
		return Grant{}, err
	case r.outcome == reenterLost:
		return Grant{}, s.leaseLost(ctx, l, "")
	case r.outcome == reenterUpgradeRefused:
		return Grant{}, fmt.Errorf("%w: lock %q: the lease holds it shared", ErrUpgradeRefused, req.Lock)
	case r.outcome == reenterMismatch:
		return Grant{}, &PermitsMismatchError{Semaphore: req.Lock, Permits: r.size}
	case acked != nil: // the re-entry took one more hold: that hold, and only it, is given back
		if req.IdempotencyKey == "" { // with a key, the retry replays the re-entry instead
			s.undoUnacked(ctx, l, req.mode())
		}
		return Grant{}, acked
	}
	// r.ttl: a replayed answer's is what the lease has left
	g := Grant{Lease: l, Mode: req.mode(), Token: req.Token, TTL: r.ttl, ExpiresAt: start.Add(s.dep.validity(r.ttl)), Holds: r.holds,
		Watchdog: r.watchdog, Reentered: true, Used: r.used}
	if req.Kind == KindSemaphore {
		g.Permits = req.Permits
	}
	if g.Watchdog {
		s.watchdog.reschedule(ctx, g.Lease, g.TTL)
	}
	return g, nil
}

// undoUnacked gives back the one hold of mode that a grant the replicas did not acknowledge gave
// l, so that a grant the client is told failed holds nothing, even on the old master. Only a reply
// that says a hold was taken is undone: a refusal took nothing, and undoing it would take back a
// hold the lease had before.
func (s *Service) undoUnacked(ctx context.Context, l Lease, mode Mode) {
	if _, rerr := s.releaseLease(context.WithoutCancel(ctx), l, "", mode); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
		s.log.Warn("giving back a grant the replicas did not acknowledge failed; it runs out with its TTL", l.Kind.String(), l.Lock, "err", rerr)
	}
}

// undo gives back one hold of g, on a context of its own: the caller's may have ended. An
// election's leader resigns (its `resigned` entry, if it was announced, with the release).
func (s *Service) undo(ctx context.Context, g Grant) {
	if g.Kind == KindElection {
		_, _ = s.resignLease(context.WithoutCancel(ctx), g.Lease, "")
		return
	}
	_, _ = s.releaseLease(context.WithoutCancel(ctx), g.Lease, "", g.Mode)
}
