package lockcore

import (
	"context"
	"errors"
	"time"
)

// Renew sets the TTL of the lease token names (every hold it has on ref) to ttl, or to the lease's
// current TTL when ttl is 0. It never resurrects a lease: it returns ErrLeaseLost when the lease
// no longer holds, ErrInvalidToken for a bad token, and ErrUnavailable when Redis does not answer.
// A watchdog lease's next renewal is rescheduled to a third of the new TTL. A renewal is
// idempotent by nature: a retry sets the same TTL again (from a little later) and never revives a
// lease.
func (s *Service) Renew(ctx context.Context, ref Ref, token string, ttl time.Duration) (Grant, error) {
	if err := s.offered(ref); err != nil {
		return Grant{}, err
	}
	l, err := s.tokens.Parse(token, ref)
	if err != nil {
		return Grant{}, err
	}
	if err := s.space.admits(ref, ttl); err != nil {
		return Grant{}, err
	}
	g, err := s.renewLease(ctx, l, ttl, time.Now(), false)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			s.ledgers.held.uncount(ctx, l.Principal, heldMember(l.Ref(), l.ID))
		}
		s.observeRefusal(l.Kind.String(), err)
		return Grant{}, err
	}
	g.Token = token
	s.ledgers.held.extend(ctx, l.Principal, g.TTL+heldSlack, heldMember(l.Ref(), l.ID)) // never shortened
	if g.Watchdog {
		_ = s.watchdog.schedule(ctx, g.Lease, g.TTL, false) // a failure is logged: the old schedule stays
	} else {
		s.ledgers.long.track(ctx, l, g.TTL)
	}
	if ref.Kind == KindElection { // its log lives as long as it is renewed
		s.keepElection(ctx, ref)
	}
	return g, nil
}

// renewLease sets l's TTL (0: keep its own) if l still holds; start is when the caller began, from
// which the expiry is counted. A waiter confirming a hand-off renews too (confirming).
func (s *Service) renewLease(ctx context.Context, l Lease, ttl time.Duration, start time.Time, confirming bool) (Grant, error) {
	a := renewArgs{lease: l.ID, ttl: ttl, confirming: confirming}
	reply, err := s.dep.run(ctx, a.call(s.lockCall(l.Ref())))
	if err != nil && !notAcked(err) {
		return Grant{}, err
	}
	acked := err
	r, err := decodeRenew(l.Lock, reply)
	switch {
	case err != nil:
		return Grant{}, err
	case r.lost: // a refusal needs no acknowledgement
		return Grant{}, s.leaseLost(ctx, l, "")
	case acked != nil: // renewed, but not on enough replicas to be promised
		return Grant{}, acked
	}
	l.Fence = r.fence
	g := Grant{Lease: l, Mode: Exclusive, TTL: r.ttl, ExpiresAt: start.Add(s.dep.validity(r.ttl)), Holds: r.holds, Watchdog: r.watchdog,
		Used: r.used, Permits: r.size}
	if r.shared {
		g.Mode = Shared
	}
	return g, nil
}
