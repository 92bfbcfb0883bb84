package lockcore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Renew sets the TTL of the lease token names (every hold it has on ref) to ttl, or to the lease's
// current TTL when ttl is 0. It never resurrects a lease: it returns ErrLeaseLost when the lease
// no longer holds, ErrInvalidToken for a bad token, and ErrUnavailable when Redis does not answer.
// A watchdog lease's next renewal is rescheduled to a third of the new TTL. A renewal is
// idempotent by nature: a retry sets the same TTL again (from a little later) and never revives a
// lease.
func (s *Service) Renew(ctx context.Context, ref Ref, token string, ttl time.Duration) (Grant, error) {
	if err := s.notOnRedLock(ref); err != nil {
		return Grant{}, err
	}
	l, err := s.tokens.Parse(token, ref)
	if err != nil {
		return Grant{}, err
	}
	g, err := s.renewLease(ctx, l, ttl, time.Now())
	if err != nil {
		if s.rl != nil && errors.Is(err, ErrLeaseLost) {
			s.giveBackEverywhere(ctx, l) // what a minority still holds: see renewDueRedLock
		}
		if errors.Is(err, ErrLeaseLost) {
			s.uncountHeld(ctx, l.Principal, heldMember(l.Ref(), l.ID))
		}
		s.observeRefusal(l.Kind.String(), err)
		return Grant{}, err
	}
	g.Token = token
	s.extendHeld(ctx, l.Principal, g.TTL+heldSlack, heldMember(l.Ref(), l.ID)) // never shortened
	if g.Watchdog {
		s.reschedule(ctx, g)
	} else if s.mayOutlive(l, g.TTL) {
		s.trackAged(ctx, l)
	}
	return g, nil
}

// renewLease sets l's TTL (0: keep its own) if l still holds; start is when the caller began, from
// which the expiry is counted.
func (s *Service) renewLease(ctx context.Context, l Lease, ttl time.Duration, start time.Time) (Grant, error) {
	reply, err := s.runQueued(ctx, s.renew, l.Ref(), l.ID, ms(ttl))
	if err != nil && !notAcked(err) {
		return Grant{}, err
	}
	acked := err
	r, err := ints(reply) // {0} | {holds, fence, ttl, watchdog, shared, used, size}
	if err != nil || (len(r) != 1 && len(r) != 7) {
		return Grant{}, unexpectedReply("renew", l.Lock, r, err)
	}
	if r[0] == 0 { // a refusal needs no acknowledgement
		return Grant{}, fmt.Errorf("%w: %s %q, lease %s", ErrLeaseLost, l.Kind, l.Lock, l.ID)
	}
	if acked != nil { // renewed, but not on enough replicas to be promised
		return Grant{}, acked
	}
	l.Fence, ttl = r[1], time.Duration(r[2])*time.Millisecond
	g := Grant{Lease: l, Mode: Exclusive, TTL: ttl, ExpiresAt: start.Add(s.validity(ttl)), Holds: r[0], Watchdog: r[3] == 1,
		Used: r[5], Permits: r[6]}
	if r[4] == 1 {
		g.Mode = Shared
	}
	return g, nil
}
