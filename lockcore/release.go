package lockcore

import (
	"context"
	"fmt"
)

// Released reports what a release left behind.
type Released struct {
	Released bool  // the reentry count reached zero and the lock is free
	Holds    int64 // remaining reentry count
}

// Release gives back one hold of the lease token names on lock. With an idempotencyKey, a retry
// (same key and token) within IdempotencyWindow answers as the first release did and gives back
// nothing more. It returns ErrInvalidToken for a bad token, ErrLeaseLost when the lease no longer
// holds the lock, and ErrUnavailable when Redis does not answer.
func (s *Service) Release(ctx context.Context, lock, token, idempotencyKey string) (Released, error) {
	l, err := s.tokens.Parse(token, lock)
	if err != nil {
		return Released{}, err
	}
	return s.releaseLease(ctx, l, idempotencyKey)
}

func (s *Service) releaseLease(ctx context.Context, l Lease, idempotencyKey string) (Released, error) {
	reply, err := s.runWithKeys(ctx, s.release, l.Lock, []string{s.keys(l.Lock).latch("release", l.ID, idempotencyKey)},
		l.ID, s.idemMs(idempotencyKey))
	if err != nil {
		return Released{}, err
	}
	r, err := ints(reply)
	if err != nil || len(r) < 1 {
		return Released{}, unexpectedReply("release", l.Lock, r, err)
	}
	if r[0] < 0 {
		return Released{}, fmt.Errorf("%w: lock %q, lease %s", ErrLeaseLost, l.Lock, l.ID)
	}
	if r[0] == 0 && len(r) == 2 && r[1] == 1 {
		s.unschedule(ctx, l)
	}
	return Released{Released: r[0] == 0, Holds: r[0]}, nil
}
