package lockcore

import (
	"context"
	"fmt"
	"time"
)

// Released reports what a release left behind.
type Released struct {
	Released bool  // the reentry count reached zero and the lock is free
	Holds    int64 // remaining reentry count
}

// Release gives back one hold of the lease token names on lock. It returns ErrInvalidToken for a
// bad token, ErrLeaseLost when the lease no longer holds the lock, and ErrUnavailable when Redis
// does not answer.
func (s *Service) Release(ctx context.Context, lock, token string) (Released, error) {
	l, err := s.tokens.Parse(token, lock)
	if err != nil {
		return Released{}, err
	}
	return s.releaseLease(ctx, l)
}

func (s *Service) releaseLease(ctx context.Context, l Lease) (Released, error) {
	reply, err := s.exec(ctx, s.release, s.keys(l.Lock).all(), []string{l.ID, s.claimMs, s.chanPrefix})
	if err != nil {
		return Released{}, err
	}
	r, err := ints(reply)
	if err != nil || len(r) < 1 {
		return Released{}, fmt.Errorf("release %q: unexpected reply %v: %w", l.Lock, r, err)
	}
	if r[0] < 0 {
		return Released{}, fmt.Errorf("%w: lock %q, lease %s", ErrLeaseLost, l.Lock, l.ID)
	}
	if r[0] == 0 && len(r) == 2 && r[1] == 1 {
		s.dropDuty(ctx, l)
	}
	return Released{Released: r[0] == 0, Holds: r[0]}, nil
}

// Renew sets the TTL of the lease token names to ttl, or to the lease's current TTL when ttl is 0.
// It never resurrects a lease: it returns ErrLeaseLost when the lease no longer holds the lock,
// ErrInvalidToken for a bad token, and ErrUnavailable when Redis does not answer.
func (s *Service) Renew(ctx context.Context, lock, token string, ttl time.Duration) (Grant, error) {
	l, err := s.tokens.Parse(token, lock)
	if err != nil {
		return Grant{}, err
	}
	g, err := s.renewLease(ctx, l, ttl, time.Now())
	g.Token = token
	return g, err
}

// renewLease sets l's TTL (0: keep its own) if l still holds its lock; start is when the caller
// began, from which the expiry is counted.
func (s *Service) renewLease(ctx context.Context, l Lease, ttl time.Duration, start time.Time) (Grant, error) {
	k := s.keys(l.Lock)
	reply, err := s.exec(ctx, s.renew, []string{k.lock, k.q, k.qm}, []string{l.ID, ms(ttl), s.chanPrefix})
	if err != nil {
		return Grant{}, err
	}
	r, err := ints(reply)
	if err != nil || (len(r) != 1 && len(r) != 4) {
		return Grant{}, fmt.Errorf("renew %q: unexpected reply %v: %w", l.Lock, r, err)
	}
	if r[0] == 0 {
		return Grant{}, fmt.Errorf("%w: lock %q, lease %s", ErrLeaseLost, l.Lock, l.ID)
	}
	l.Fence, ttl = r[1], time.Duration(r[2])*time.Millisecond
	return Grant{Lease: l, TTL: ttl, ExpiresAt: start.Add(ttl), Holds: r[0], Watchdog: r[3] == 1}, nil
}
