package lockcore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// acquireWaiting queues for req.Lock and waits up to req.Wait for it.
//
// The waiter joins this process's room before it enqueues in Redis, so a grant published right
// after the enqueue still finds it. Grants are direct hand-offs: the script that frees the lock gives
// it to the queue head (FIFO across replicas) and publishes one message to that waiter's replica,
// which confirms the grant here by setting the waiter's TTL. On timeout it returns a *HeldError with
// Waited set; when ctx ends it returns ctx's error. Either way the waiter leaves the queue, and a
// grant that reached it meanwhile is passed on.
func (s *Service) acquireWaiting(ctx context.Context, req AcquireRequest) (Grant, error) {
	start := time.Now()
	lease := uuid.NewString()
	w, err := s.room.join(req.Lock, lease)
	if err != nil {
		return Grant{}, err
	}
	defer s.room.leave(w)
	timeout := time.NewTimer(req.Wait)
	defer timeout.Stop()

	var score int64 // arrival in the queue, kept when queueing again
	for {
		r, err := s.runAcquire(ctx, req, lease, "wait", score)
		if err != nil {
			s.giveUp(ctx, req.Lock, lease)
			return Grant{}, err
		}
		if r.status == acquireGranted {
			return s.newGrant(req, lease, r.fence, time.Now()), nil
		}
		score = r.score
		s.room.expect(req.Lock, time.Now().Add(r.pttl+time.Millisecond))

		var ev event
		select {
		case ev = <-w.events:
		case <-timeout.C:
			pttl, err := s.giveUp(ctx, req.Lock, lease)
			if errors.Is(err, errGrantPassedOn) {
				pttl = s.claimTTL
			}
			return Grant{}, &HeldError{Lock: req.Lock, RetryAfter: pttl, Waited: time.Since(start)}
		case <-ctx.Done():
			s.giveUp(ctx, req.Lock, lease)
			return Grant{}, ctx.Err()
		case <-s.room.ctx.Done():
			s.giveUp(ctx, req.Lock, lease)
			return Grant{}, errShuttingDown
		}
		if ev.requeue {
			continue
		}
		g, err := s.confirm(ctx, req, lease, ev.fence)
		if errors.Is(err, ErrLeaseLost) {
			continue // the claim ran out before we confirmed it: queue again at our arrival
		}
		return g, err
	}
}

// confirm turns a lock handed to lease (reserved for the claim TTL) into the waiter's grant.
func (s *Service) confirm(ctx context.Context, req AcquireRequest, lease string, fence int64) (Grant, error) {
	start := time.Now()
	l := Lease{Lock: req.Lock, Owner: req.Owner, ID: lease, Fence: fence}
	g, err := s.renewLease(ctx, l, req.TTL, start)
	if err != nil {
		return Grant{}, err
	}
	g.Token = s.tokens.Mint(g.Lease)
	return g, nil
}

// errGrantPassedOn: a waiter gave up after the lock had been handed to it; it was passed on.
var errGrantPassedOn = errors.New("grant passed on")

// giveUp takes lease out of lock's queue on a context of its own (the caller's may have ended).
// It returns the lock's remaining TTL, or errGrantPassedOn when the lock had reached lease and
// was passed on to the next waiter.
func (s *Service) giveUp(ctx context.Context, lock, lease string) (time.Duration, error) {
	reply, err := s.exec(context.WithoutCancel(ctx), s.dequeue, s.keys(lock).all(), []string{lease, ms(s.claimTTL), s.chanPrefix})
	if err != nil {
		// The entry ages out of the queue within the liveness window once this process stops
		// refreshing it.
		s.log.Warn("leaving the wait queue failed", "lock", lock, "err", err)
		return 0, err
	}
	r, err := ints(reply)
	if err != nil || len(r) < 1 {
		return 0, fmt.Errorf("dequeue %q: unexpected reply %v: %w", lock, r, err)
	}
	if r[0] == 1 {
		return 0, errGrantPassedOn
	}
	return time.Duration(max(r[1], 0)) * time.Millisecond, nil
}
