package lockcore

import (
	"context"
	"fmt"
	"time"
)

// reenter re-enters the lease req.Token names (one hold more, or a semaphore permit's renewal)
// and sets *g to its grant: the token is checked, reenter.lua runs, and a hold the replicas did
// not acknowledge is given back again. The lease keeps its count among its principal's holds, to
// the new TTL's end at least. The grant is not finished yet (see finishGrant: a watchdog lease's
// next renewal moves to a third of its new TTL).
func (s *Service) reenter(ctx context.Context, req *AcquireRequest, g *Grant) error {
	l, err := s.tokens.Parse(req.Token, req.ref())
	if err != nil {
		return err
	}
	if l.Owner != req.Owner {
		return fmt.Errorf("%w: owner %q does not match the lease token's owner %q", ErrInvalid, req.Owner, l.Owner)
	}
	start := time.Now()
	a := reenterArgs{lease: l.ID, ttl: req.TTL, idem: s.idem(req.IdempotencyKey).claiming(req.claim), mode: req.mode(), permits: req.Permits}
	reply, err := s.dep.run(ctx, a.call(s.lockCall(req.ref())))
	if err != nil && !notAcked(err) {
		return err
	}
	acked := err
	r, err := decodeReenter(req.Lock, reply)
	switch {
	case err != nil:
		return err
	case r.outcome == reenterLost:
		return s.leaseLost(ctx, l, "")
	case r.outcome == reenterUpgradeRefused:
		return fmt.Errorf("%w: lock %q: the lease holds it shared", ErrUpgradeRefused, req.Lock)
	case r.outcome == reenterMismatch:
		return &PermitsMismatchError{Semaphore: req.Lock, Permits: r.size}
	case acked != nil: // the re-entry took one more hold: that hold, and only it, is given back
		if req.IdempotencyKey == "" { // with a key, the retry replays the re-entry instead
			s.giveBackUnacked(ctx, l, req.mode())
		}
		return acked
	}
	// Counted to its new TTL's end at least (a watchdog lease's count, to its max hold, is never
	// shortened).
	s.ledgers.held.extend(ctx, l.Principal, r.ttl+heldSlack, heldMember(req.ref(), l.ID))
	// r.ttl: a replayed answer's is what the lease has left
	*g = Grant{Lease: l, Mode: req.mode(), Token: req.Token, TTL: r.ttl, ExpiresAt: start.Add(s.dep.validity(r.ttl)), Holds: r.holds,
		Watchdog: r.watchdog, Reentered: true, Used: r.used}
	if req.Kind == KindSemaphore {
		g.Permits = req.Permits
	}
	return nil
}
