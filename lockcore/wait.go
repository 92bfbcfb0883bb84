package lockcore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
)

// A waiting acquire is a small state machine that holds no goroutine while it is parked: it runs
// on a goroutine of its own only while it has work (a Redis call, an event to act on), so a parked
// long-poll costs a few hundred bytes of heap and no stack. (Acquire remains a synchronous method
// bounded by ctx, built on this machine; a goroutine per parked long-poll is what kept 10,000 of
// them above the 150 MB budget.)
//
// The waiter joins this process's room before it enqueues in Redis, so a grant published right
// after the enqueue still finds it. Grants are direct hand-offs: the script that frees the lock
// gives it to the queue head (FIFO across replicas) and publishes one message to that waiter's
// replica, which confirms the grant by setting the waiter's TTL. A waiter rides out Redis errors
// (a restart, a killed connection) until its wait ends, queueing again at its original arrival.
type wait struct {
	s     *Service
	req   AcquireRequest
	lease string
	start time.Time
	w     *waiter
	done  func(Grant, error)

	deadline  *time.Timer
	stopClose func() bool // unhooks the Service's Close

	mu      sync.Mutex
	phase   waitPhase
	running bool  // a goroutine is advancing the wait
	pausing bool  // a retry after a Redis error is due later
	score   int64 // arrival in the queue, kept when queueing again
	tried   bool  // the first try has been made (a wait that ran out still tries once)
	left    error // the caller left (cancel's cause)
	expired bool  // the wait's time ran out
	closing bool  // the Service is closing
	failing error // the last Redis call failed with this (ErrUnavailable), nil after a success
}

type waitPhase int

const (
	phaseEnqueue waitPhase = iota // next: try, or join the queue
	phaseParked                   // queued: waiting for an event
	phaseConfirm                  // handed the lock: next, confirm it
	phaseOver                     // done has been called
)

// retryPause is how long a waiter waits before retrying a Redis call that failed.
const retryPause = 50 * time.Millisecond

// StartAcquire is Acquire for a caller that must not hold a goroutine while it waits. It makes the
// first try on the caller's goroutine and returns once the request is granted, refused, parked in
// the lock's queue, or pausing after a Redis error; done is called exactly once with what Acquire
// would return, either before StartAcquire returns or later on another goroutine. cancel(cause) is
// the caller leaving (Acquire's ctx ending): done then gets cause, and a grant that reached the
// caller meanwhile has been passed on or undone. req.Queued, when set, is called when the request
// parks.
func (s *Service) StartAcquire(req AcquireRequest, done func(Grant, error)) (cancel func(cause error)) {
	if req.Token != "" || req.Wait <= 0 {
		done(s.Acquire(context.Background(), req))
		return func(error) {}
	}
	return s.startWait(req, done)
}

// acquireWaiting queues for req.Lock and waits up to req.Wait for it. On timeout it returns a
// *HeldError with Waited set; when ctx ends, ctx's error; when the Service closes, ErrUnavailable;
// when Redis is still failing as the wait ends, ErrUnavailable. Whenever it returns without a
// grant, the waiter has left the queue, and a grant that reached it meanwhile has been passed on.
func (s *Service) acquireWaiting(ctx context.Context, req AcquireRequest) (Grant, error) {
	type result struct {
		g   Grant
		err error
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	ch := make(chan result, 1)
	cancel := s.startWait(req, func(g Grant, err error) { ch <- result{g, err} })
	stop := context.AfterFunc(ctx, func() { cancel(ctx.Err()) })
	r := <-ch
	stop()
	if r.err == nil && ctx.Err() != nil { // ctx ended during the first try, which granted
		s.undo(ctx, r.g)
		return Grant{}, ctx.Err()
	}
	return r.g, r.err
}

func (s *Service) startWait(req AcquireRequest, done func(Grant, error)) (cancel func(error)) {
	wt := &wait{s: s, req: req, lease: uuid.NewString(), start: time.Now(), done: done, running: true}
	w, err := s.room.join(req.Lock, wt.lease, wt.kick) // counts the wait in s.wg until finish
	if err != nil {
		done(Grant{}, err)
		return func(error) {}
	}
	wt.w = w
	wt.deadline = time.AfterFunc(req.Wait, func() { wt.set(func() { wt.expired = true }) })
	wt.stopClose = context.AfterFunc(s.ctx, func() { wt.set(func() { wt.closing = true }) })
	wt.run() // the first try, on the caller's goroutine: most waits are granted or parked by it
	return func(cause error) {
		wt.set(func() {
			if wt.left == nil {
				wt.left = cause
			}
		})
	}
}

// set changes the wait's state under its lock and makes sure a goroutine acts on it.
func (wt *wait) set(change func()) {
	wt.mu.Lock()
	change()
	wt.mu.Unlock()
	wt.kick()
}

// kick starts a goroutine to advance the wait unless one is running; the room calls it after
// delivering an event.
func (wt *wait) kick() {
	wt.mu.Lock()
	if wt.running || wt.phase == phaseOver {
		wt.mu.Unlock()
		return
	}
	wt.running = true
	wt.mu.Unlock()
	go wt.run()
}

// run advances the wait until it parks, pauses before a retry, or ends.
func (wt *wait) run() {
	for {
		wt.mu.Lock()
		phase, failing := wt.phase, wt.failing
		left := wt.left != nil || wt.closing
		over := left || (wt.expired && wt.tried)
		var (
			ev  event
			got bool
		)
		if phase == phaseParked && !left {
			// An event that is in wins over the deadline: a lock that reached the waiter as its
			// wait ran out is still its grant.
			select {
			case ev = <-wt.w.events:
				got = true
			default:
			}
		}
		switch {
		case phase == phaseOver:
			wt.running = false
			wt.mu.Unlock()
			return
		case wt.pausing && !over:
			wt.running = false
			wt.mu.Unlock()
			return
		case phase == phaseParked && !got && !over:
			wt.running = false // parked: the next event kicks a new goroutine
			wt.mu.Unlock()
			return
		}
		wt.mu.Unlock()

		switch {
		case phase == phaseEnqueue && over, phase == phaseParked && !got && over, phase == phaseConfirm && left:
			wt.finish(wt.end(failing))
		case phase == phaseEnqueue:
			wt.enqueue()
		case phase == phaseParked && ev.requeue:
			wt.setPhase(phaseEnqueue)
		case phase == phaseParked:
			wt.setPhase(phaseConfirm)
		case phase == phaseConfirm:
			wt.confirm()
		}
	}
}

// enqueue tries for the lock and joins its queue when it is held.
func (wt *wait) enqueue() {
	callStart := time.Now()
	r, err := wt.s.runAcquire(context.Background(), wt.req, wt.lease, "wait", wt.score)
	wt.mu.Lock()
	wt.failing, wt.tried = nil, true
	wt.mu.Unlock()
	switch {
	case err != nil:
		// Even a failed first enqueue may have landed (its reply lost): ride out Redis errors
		// until the wait ends, keeping our place (ZADD NX keeps an existing arrival).
		if errors.Is(err, ErrUnavailable) && wt.pause(err) {
			return
		}
		wt.finish(wt.end(err))
	case r.status == acquireGranted:
		wt.finish(wt.s.newGrant(wt.req, wt.lease, r.fence, callStart), nil)
	default:
		wt.mu.Lock()
		wt.score, wt.phase = r.score, phaseParked
		queued := wt.req.Queued
		wt.req.Queued = nil
		wt.mu.Unlock()
		wt.s.room.expect(wt.req.Lock, time.Now().Add(r.pttl+time.Millisecond))
		if queued != nil {
			queued()
		}
	}
}

// confirm turns the lock handed to this waiter into its grant.
func (wt *wait) confirm() {
	g, err := wt.s.confirm(context.Background(), wt.req, wt.lease)
	wt.mu.Lock()
	wt.failing = nil
	wt.mu.Unlock()
	switch {
	case err == nil:
		wt.finish(g, nil)
	case errors.Is(err, ErrUnavailable) && wt.pause(err):
		// confirming is idempotent: try again after the pause
	case errors.Is(err, ErrUnavailable):
		wt.finish(wt.end(err))
	case errors.Is(err, ErrLeaseLost):
		wt.setPhase(phaseEnqueue) // the claim ran out before we confirmed it: queue again at our arrival
	default:
		wt.finish(Grant{}, err)
	}
}

func (wt *wait) setPhase(p waitPhase) {
	wt.mu.Lock()
	wt.phase = p
	wt.mu.Unlock()
}

// pause schedules a retry after retryPause of a call that failed with err; it reports false when
// the wait should end instead.
func (wt *wait) pause(err error) bool {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if wt.left != nil || wt.expired || wt.closing {
		return false
	}
	wt.pausing, wt.failing = true, err
	time.AfterFunc(retryPause, func() { wt.set(func() { wt.pausing = false }) })
	return true
}

// finish ends the wait: it leaves the room, settles a grant (watchdog enrolment, or undoing it
// for a caller that left meanwhile), and calls done. The Service's Close waits for it.
func (wt *wait) finish(g Grant, err error) {
	defer wt.s.wg.Done()
	wt.mu.Lock()
	wt.phase = phaseOver
	wt.mu.Unlock()
	wt.deadline.Stop()
	wt.stopClose()
	wt.s.room.leave(wt.w)
	if err == nil {
		g, err = wt.s.settle(context.Background(), g, func() error {
			wt.mu.Lock()
			defer wt.mu.Unlock()
			return wt.left
		})
	}
	wt.done(g, err)
}

// end takes the waiter out of the queue and says why it got no grant: the caller left (its
// cause), the Service closed, cause (Redis still failing), or the wait ran out.
func (wt *wait) end(cause error) (Grant, error) {
	pttl, err := wt.s.giveUp(context.Background(), wt.req.Lock, wt.lease)
	wt.mu.Lock()
	left, closing := wt.left, wt.closing
	wt.mu.Unlock()
	switch {
	case left != nil:
		return Grant{}, left
	case closing:
		return Grant{}, errShuttingDown
	case cause != nil:
		return Grant{}, cause
	}
	if errors.Is(err, errGrantPassedOn) {
		pttl = wt.s.claimTTL
	}
	return Grant{}, &HeldError{Lock: wt.req.Lock, RetryAfter: pttl, Waited: time.Since(wt.start)}
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

// giveUp takes lease out of lock's queue. It returns the lock's remaining TTL, or
// errGrantPassedOn when the lock had reached lease and was passed on to the next waiter.
func (s *Service) giveUp(ctx context.Context, lock, lease string) (time.Duration, error) {
	reply, err := s.exec(ctx, s.dequeue, s.keys(lock).all(), []string{lease, s.claimMs, s.chanPrefix})
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
