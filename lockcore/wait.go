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
// which confirms the grant here by setting the waiter's TTL. A waiter rides out Redis errors (a
// restart, a killed connection) until its wait ends, queueing again at its original arrival, and
// returns ErrUnavailable if Redis is still failing then. On timeout it returns a *HeldError with Waited set; when ctx ends, ctx's
// error; when the Service closes, ErrUnavailable. Whenever it returns without a grant, the waiter
// has left the queue, and a grant that reached it meanwhile has been passed on.
func (s *Service) acquireWaiting(ctx context.Context, req AcquireRequest) (Grant, error) {
	start := time.Now()
	lease := uuid.NewString()
	w, err := s.room.join(req.Lock, lease)
	if err != nil {
		return Grant{}, err
	}
	defer s.room.leave(w)
	waitCtx, cancel := context.WithDeadline(ctx, start.Add(req.Wait))
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel) // Close ends every wait
	defer stop()

	var score int64 // arrival in the queue, kept when queueing again
	for {
		callStart := time.Now()
		r, err := offStack(func() (acquireReply, error) { return s.runAcquire(ctx, req, lease, "wait", score) })
		if err != nil {
			// Even a failed first enqueue may have landed (its reply lost): ride out Redis errors
			// until the wait ends, keeping our place (ZADD NX keeps an existing arrival).
			if errors.Is(err, ErrUnavailable) && pause(waitCtx) {
				continue
			}
			return Grant{}, s.endWait(ctx, req.Lock, lease, start, err)
		}
		if r.status == acquireGranted {
			return s.newGrant(req, lease, r.fence, callStart), nil
		}
		score = r.score
		s.room.expect(req.Lock, time.Now().Add(r.pttl+time.Millisecond))

		var ev event
		select {
		case ev = <-w.events:
		case <-waitCtx.Done():
			return Grant{}, s.endWait(ctx, req.Lock, lease, start, nil)
		}
		if ev.requeue {
			continue
		}
	confirming:
		for {
			g, err := s.confirm(ctx, req, lease)
			switch {
			case err == nil:
				return g, nil
			case errors.Is(err, ErrUnavailable) && pause(waitCtx):
				continue // confirming is idempotent
			case errors.Is(err, ErrUnavailable):
				return Grant{}, s.endWait(ctx, req.Lock, lease, start, err)
			case !errors.Is(err, ErrLeaseLost):
				return Grant{}, err
			}
			break confirming // the claim ran out before we confirmed it: queue again at our arrival
		}
	}
}

// pause waits a moment before a retry; it reports false when ctx ended first.
func pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

// endWait takes a waiter that is done waiting out of the queue and says why it got no grant:
// cause if not nil, else the caller left (ctx's error), the Service closed, or the wait ran out.
func (s *Service) endWait(ctx context.Context, lock, lease string, start time.Time, cause error) error {
	pttl, err := s.giveUp(ctx, lock, lease)
	switch {
	case cause != nil:
		return cause
	case ctx.Err() != nil:
		return ctx.Err()
	case s.ctx.Err() != nil:
		return errShuttingDown
	}
	if errors.Is(err, errGrantPassedOn) {
		pttl = s.claimTTL
	}
	return &HeldError{Lock: lock, RetryAfter: pttl, Waited: time.Since(start)}
}

// confirm turns a lock handed to lease (reserved for the claim TTL) into the waiter's grant.
// The fence is the one Redis recorded at the grant.
func (s *Service) confirm(ctx context.Context, req AcquireRequest, lease string) (Grant, error) {
	start := time.Now()
	l := Lease{Lock: req.Lock, Owner: req.Owner, ID: lease}
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
	reply, err := s.exec(context.WithoutCancel(ctx), s.dequeue, s.keys(lock).all(), []string{lease, s.claimMs, s.chanPrefix})
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

// offStack runs f on a short-lived goroutine. A waiter parks for up to LEASEGATE_MAX_WAIT holding
// its goroutine's stack, which keeps the size of the deepest call it made; keeping the Redis
// client's call chain off that stack roughly halves the memory of a parked long-poll.
func offStack[T any](f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}
