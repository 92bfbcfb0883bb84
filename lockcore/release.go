package lockcore

import (
	"context"
	"errors"
	"time"
)

// ReleaseRequest gives back one hold of the lease Token names.
type ReleaseRequest struct {
	Ref   Ref
	Token string
	// IdempotencyKey, when set, makes a retry (same key and token) within IdempotencyWindow answer
	// as the first release did and give back nothing more.
	IdempotencyKey string
	// Mode picks which hold of a lock a lease holding it both ways gives back; the zero value
	// means its exclusive hold if it has one (a downgrade), else its shared one.
	Mode Mode
}

// Released reports what a release left behind.
type Released struct {
	Released bool  // the hold's count reached zero: that hold is given back
	Holds    int64 // remaining count of that hold
	Mode     Mode  // the hold that was given back (or decremented)
	// otherHeld: the lease still holds the lock the other way (a downgrade's shared hold).
	otherHeld bool
}

// Release gives back one hold of the lease req.Token names. It returns ErrInvalidToken for a bad
// token, ErrLeaseLost when the lease no longer holds (that way), and ErrUnavailable when Redis does
// not answer.
func (s *Service) Release(ctx context.Context, req ReleaseRequest) (Released, error) {
	if err := s.offered(req.Ref); err != nil {
		return Released{}, err
	}
	if req.Ref.Kind == KindElection {
		return Released{}, errCampaignOnly(req.Ref, "resign from it (Resign) rather than release it")
	}
	l, err := s.tokens.Parse(req.Token, req.Ref)
	if err != nil {
		return Released{}, err
	}
	var claim *idemClaim // no fingerprint to make without a key
	if req.IdempotencyKey != "" {
		if claim, err = s.claimIdempotencyKey(ctx, req.Ref, req.IdempotencyKey, releaseFingerprint(l, req.Mode), 0); err != nil {
			return Released{}, err
		}
	}
	rel, err := s.releaseLease(ctx, l, s.idem(req.IdempotencyKey).claiming(claim), req.Mode)
	// The hold's count goes when the lease holds nothing more: a release that gave back one hold
	// of a lease holding the lock both ways, or that names a mode the lease does not hold, leaves
	// it counted.
	if rel.Released && !rel.otherHeld || errors.Is(err, ErrLeaseLost) && req.Mode == "" {
		s.ledgers.held.uncount(ctx, l.Principal, heldMember(l.Ref(), l.ID))
	}
	switch {
	case err != nil:
		s.observeRefusal(l.Kind.String(), err)
	case rel.Released:
		s.obs.HoldReleased(l.Kind.String(), rel.Mode, heldSince(l.Fence, time.Now()))
	}
	return rel, err
}

func (s *Service) releaseLease(ctx context.Context, l Lease, idem idemKey, mode Mode) (Released, error) {
	which := ""
	switch {
	case l.Kind == KindSemaphore:
		which = "s"
	case mode != "":
		which = mode.arg()
	}
	a := releaseArgs{lease: l.ID, idem: idem, which: which, here: s.waiters.handingOver()}
	start := time.Now()
	reply, err := s.dep.run(ctx, a.call(s.lockCall(l.Ref())))
	if err != nil {
		return Released{}, err
	}
	r, err := decodeRelease(l.Lock, reply)
	s.waiters.handOver(r.handed, start)
	switch {
	case err != nil:
		return Released{}, err
	case r.lost:
		return Released{}, s.leaseLost(ctx, l, mode)
	case r.watchdog:
		s.watchdog.unschedule(ctx, l)
	}
	released := Released{Released: r.holds == 0, Holds: r.holds, Mode: Exclusive, otherHeld: r.other}
	if r.shared || l.Kind == KindSemaphore {
		released.Mode = Shared
	}
	return released, nil
}
