package lockcore

import (
	"context"

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
//
// The way of a request, one step after the other: the checks and the Idempotency-Key's claim
// (here), then either the re-entry (reenter.go) or a new lease's grant: counted among its
// principal's holds (held_quota.go), taken at once (grant.go) or after a wait (wait.go), and
// finished (grant.go: the watchdog's enrolment, the long-hold report, the undo of a grant whose
// caller left); last, the observer hears how it ended (observer.go).
func (s *Service) Acquire(ctx context.Context, req AcquireRequest) (g Grant, err error) {
	err = s.acquire(ctx, &req, &g)
	return g, err
}

// acquire is Acquire on pointers. A waiting acquire blocks below it, on its caller's goroutine,
// whose stack keeps every frame on the way at its full size while it waits: the functions on that
// way (acquire, waitInto, waitTurn.await) keep their frames small, passing the request and the
// grant by pointer and leaving bulky work to callees (measured with go run ./bench -only waitmem:
// a stack that stays within 8 KB, instead of 16 KB, per waiting request).
func (s *Service) acquire(ctx context.Context, req *AcquireRequest, g *Grant) (err error) {
	if err := s.offered(req.ref()); err != nil {
		return err
	}
	if req.Kind == KindElection {
		return errCampaignOnly(req.ref(), "campaign for it (Campaign) rather than acquire it")
	}
	if err := s.space.admits(req.ref(), req.TTL); err != nil {
		return err
	}
	if req.IdempotencyKey != "" {
		if req.claim, err = s.claimIdempotencyKey(ctx, req.ref(), req.IdempotencyKey, req.fingerprint(req.Token), req.TTL); err != nil {
			return err
		}
	}
	lease := ""
	if req.Token != "" {
		err = s.reenter(ctx, req, g)
	} else {
		lease = uuid.NewString()
		if err = s.ledgers.held.count(ctx, req.Principal, req.HeldCap, heldSpan(req.TTL, req.Wait, req.Watchdog, req.MaxHold),
			heldMember(req.ref(), lease)); err != nil {
			return err
		}
		if req.Wait > 0 {
			err = s.waitInto(ctx, req, lease, g)
		} else {
			err = s.tryInto(ctx, req, lease, g)
		}
	}
	if err == nil {
		err = s.finishInto(ctx, req, g, (*Service).giveBack)
	}
	if err == nil && lease != "" && g.ID == lease && !s.fresh(*g) { // finishing it took too long
		err = s.tooLate(ctx, req, g)
	}
	// A new lease not granted, or a retry granted the first request's lease (counted by that
	// request), is not counted.
	if lease != "" && (err != nil && !grantUnknown(err, req.IdempotencyKey) || err == nil && g.ID != lease) {
		s.ledgers.held.uncount(ctx, req.Principal, heldMember(req.ref(), lease))
	}
	s.observeAcquire(req.Kind.String(), g, err)
	return err
}
