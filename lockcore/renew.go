package lockcore

import (
	"context"
	"fmt"
	"time"
)

// Renew sets the TTL of the lease token names to ttl, or to the lease's current TTL when ttl is 0.
// It never resurrects a lease: it returns ErrLeaseLost when the lease no longer holds the lock,
// ErrInvalidToken for a bad token, and ErrUnavailable when Redis does not answer. A watchdog
// lease's next renewal is rescheduled to a third of the new TTL. A renewal is idempotent by nature:
// a retry sets the same TTL again (from a little later) and never revives a lease.
func (s *Service) Renew(ctx context.Context, lock, token string, ttl time.Duration) (Grant, error) {
	l, err := s.tokens.Parse(token, lock)
	if err != nil {
		return Grant{}, err
	}
	g, err := s.renewLease(ctx, l, ttl, time.Now())
	if err != nil {
		return Grant{}, err
	}
	g.Token = token
	if g.Watchdog {
		s.reschedule(ctx, g)
	}
	return g, nil
}

// renewLease sets l's TTL (0: keep its own) if l still holds its lock; start is when the caller
// began, from which the expiry is counted.
func (s *Service) renewLease(ctx context.Context, l Lease, ttl time.Duration, start time.Time) (Grant, error) {
	reply, err := s.runQueued(ctx, s.renew, l.Lock, l.ID, ms(ttl))
	if err != nil {
		return Grant{}, err
	}
	r, err := ints(reply)
	if err != nil || (len(r) != 1 && len(r) != 4) {
		return Grant{}, unexpectedReply("renew", l.Lock, r, err)
	}
	if r[0] == 0 {
		return Grant{}, fmt.Errorf("%w: lock %q, lease %s", ErrLeaseLost, l.Lock, l.ID)
	}
	l.Fence, ttl = r[1], time.Duration(r[2])*time.Millisecond
	return Grant{Lease: l, TTL: ttl, ExpiresAt: start.Add(ttl), Holds: r[0], Watchdog: r[3] == 1}, nil
}
