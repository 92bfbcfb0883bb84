package lockcore_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// outcome is what one StartAcquire's done reported, and how many times it was called.
type outcome struct {
	calls atomic.Int32
	grant atomic.Pointer[lockcore.Grant]
	err   atomic.Pointer[error]
}

func (o *outcome) done(g lockcore.Grant, err error) {
	o.calls.Add(1)
	o.grant.Store(&g)
	o.err.Store(&err)
}

func (o *outcome) result() (lockcore.Grant, error, bool) {
	if o.calls.Load() == 0 {
		return lockcore.Grant{}, nil, false
	}
	return *o.grant.Load(), *o.err.Load(), true
}

// TestParkedWaitsHoldNoGoroutines parks 300 waits on one lock with StartAcquire and checks that
// parking them started no lasting goroutine (a parked wait is state, not a stack); then that
// cancelling one reports its cause and dequeues it, that a release hands the lock to the oldest
// remaining waiter, and that every done is called exactly once.
func TestParkedWaitsHoldNoGoroutines(t *testing.T) {
	w := newWaitWorld(t, lockcore.Options{})
	const lock, n = "parked", 300
	holder := w.hold(t, w.svc, lock, "holder", time.Hour)

	// The first waiter starts the lock's watch goroutine; count from there.
	first := &outcome{}
	var queued atomic.Int32
	w.svc.StartAcquire(lockcore.AcquireRequest{Lock: lock, Owner: "w0", TTL: time.Minute, Wait: time.Minute,
		Queued: func() { queued.Add(1) }}, first.done)
	pollUntil(t, 10*time.Second, "the first waiter queued", func() bool { return queued.Load() == 1 })
	before := runtime.NumGoroutine()

	outcomes := []*outcome{first}
	cancels := []func(error){}
	for i := 1; i < n; i++ {
		o := &outcome{}
		outcomes = append(outcomes, o)
		cancels = append(cancels, w.svc.StartAcquire(lockcore.AcquireRequest{Lock: lock, Owner: "w", TTL: time.Minute,
			Wait: time.Minute, Queued: func() { queued.Add(1) }}, o.done))
		// Queue them one at a time, so that FIFO order is the order of this loop.
		pollUntil(t, 10*time.Second, "waiter queued", func() bool { return queued.Load() == int32(i+1) })
	}
	w.awaitWaiters(t, lock, n)
	// Goroutines that ran the enqueues end on their own; poll until they have.
	pollUntil(t, 10*time.Second, "no goroutine per parked wait", func() bool { return runtime.NumGoroutine()-before < 20 })

	// Cancelling the second waiter reports the cause and takes it out of the queue.
	errLeft := errors.New("client left")
	cancels[0](errLeft)
	pollUntil(t, 10*time.Second, "the cancelled wait's done", func() bool { return outcomes[1].calls.Load() == 1 })
	_, err, _ := outcomes[1].result()
	assert.ErrorIs(t, err, errLeft)
	w.awaitWaiters(t, lock, n-1)

	// The release hands the lock to the oldest waiter.
	_, err = w.svc.Release(context.Background(), lock, holder.Token)
	require.NoError(t, err)
	pollUntil(t, 10*time.Second, "the first waiter's grant", func() bool { return first.calls.Load() == 1 })
	g, err, _ := first.result()
	require.NoError(t, err)
	assert.Equal(t, "w0", g.Owner)
	assert.Greater(t, g.Fence, holder.Fence)

	// The rest leave; nobody else was granted, and every done ran once.
	for _, cancel := range cancels[1:] {
		cancel(context.Canceled)
	}
	for i, o := range outcomes[2:] {
		pollUntil(t, 10*time.Second, "a cancelled wait's done", func() bool { return o.calls.Load() >= 1 })
		_, err, _ := o.result()
		assert.ErrorIs(t, err, context.Canceled, "waiter %d", i+2)
	}
	w.awaitWaiters(t, lock, 0)
	for i, o := range outcomes {
		assert.EqualValues(t, 1, o.calls.Load(), "waiter %d's done calls", i)
	}
	st, err := w.svc.Inspect(context.Background(), lock, "")
	require.NoError(t, err)
	assert.Equal(t, "w0", st.Owner)
	_, err = w.svc.Release(context.Background(), lock, g.Token)
	require.NoError(t, err)
}

// TestStartAcquireWithoutWaitAnswersLikeAcquire covers StartAcquire's other requests: a try-once
// on a held lock reports ErrHeld, and re-entry with a token increments the holds.
func TestStartAcquireWithoutWaitAnswersLikeAcquire(t *testing.T) {
	w := newWaitWorld(t, lockcore.Options{})
	holder := w.hold(t, w.svc, "try", "holder", time.Minute)

	try := &outcome{}
	w.svc.StartAcquire(lockcore.AcquireRequest{Lock: "try", Owner: "other", TTL: time.Minute}, try.done)
	pollUntil(t, 10*time.Second, "the try's done", func() bool { return try.calls.Load() == 1 })
	_, err, _ := try.result()
	assert.ErrorIs(t, err, lockcore.ErrHeld)

	again := &outcome{}
	w.svc.StartAcquire(lockcore.AcquireRequest{Lock: "try", Owner: "holder", TTL: time.Minute, Token: holder.Token}, again.done)
	pollUntil(t, 10*time.Second, "the re-entry's done", func() bool { return again.calls.Load() == 1 })
	g, err, _ := again.result()
	require.NoError(t, err)
	assert.True(t, g.Reentered)
	assert.EqualValues(t, 2, g.Holds)
}

// TestWaitThatRunsOutAtOnceStillTries: a wait shorter than the first Redis call still makes that
// call, so a free lock is granted rather than reported held.
func TestWaitThatRunsOutAtOnceStillTries(t *testing.T) {
	w := newWaitWorld(t, lockcore.Options{})
	for i := range 20 {
		g, err := w.svc.Acquire(context.Background(), lockcore.AcquireRequest{Lock: "brief", Owner: "o", TTL: time.Minute, Wait: time.Nanosecond})
		require.NoError(t, err, "round %d", i)
		_, err = w.svc.Release(context.Background(), "brief", g.Token)
		require.NoError(t, err)
	}
}

// TestWaitingAcquireWithEndedContextGrantsNothing: a waiting Acquire whose caller has already
// left gets its context's error and leaves the lock free, watchdog or not.
func TestWaitingAcquireWithEndedContextGrantsNothing(t *testing.T) {
	w := newWaitWorld(t, lockcore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, watchdog := range []bool{false, true} {
		_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "gone", Owner: "o", TTL: time.Minute, Wait: time.Second, Watchdog: watchdog})
		assert.ErrorIs(t, err, context.Canceled)
		st, err := w.svc.Inspect(context.Background(), "gone", "")
		require.NoError(t, err)
		assert.False(t, st.Held, "watchdog=%v: nobody holds the lock", watchdog)
	}
}
