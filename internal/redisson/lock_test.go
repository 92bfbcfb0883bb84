package redisson

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockLayout checks what an RLock leaves in Redis: one hash named after the lock, field
// `<instance id>:<thread id>` -> reentry count, PEXPIRE = the lease, and nothing else (the unlock
// latch is deleted once the unlock answered).
func TestLockLayout(t *testing.T) {
	r, a, _ := twoInstances(t, Options{})
	ctx := t.Context()
	l := a.Lock("orders", 7)

	ok, err := l.TryLock(ctx, 0, 10*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, a.ID()+":7\n1", r.MustDo(t, "HGETALL", "orders"))
	assert.Equal(t, "hash", r.MustDo(t, "TYPE", "orders"))
	ttl, err := l.RemainTimeToLive(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 10_000, ttl, 2_000)

	ok, err = l.TryLock(ctx, 0, 20*time.Second) // reentry: count 2, the new lease
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, a.ID()+":7\n2", r.MustDo(t, "HGETALL", "orders"))
	ttl, err = l.RemainTimeToLive(ctx)
	require.NoError(t, err)
	assert.Greater(t, ttl, int64(15_000))

	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, "0", r.MustDo(t, "EXISTS", "orders"))
	assert.Empty(t, r.MustDo(t, "KEYS", "*"), "no unlock latch left behind")
}

// TestReentryAndOwnership: holds count per thread, other threads and instances are refused, and
// an unlock by a non-holder fails like Java's IllegalMonitorStateException.
func TestReentryAndOwnership(t *testing.T) {
	_, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	mine, otherThread, otherJVM := a.Lock("stock", 1), a.Lock("stock", 2), b.Lock("stock", 1)

	for want := 1; want <= 3; want++ {
		ok, err := mine.TryLock(ctx, 0, -1)
		require.NoError(t, err)
		require.True(t, ok)
		n, err := mine.HoldCount(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, n)
	}
	for _, other := range []*Lock{otherThread, otherJVM} {
		ok, err := other.TryLock(ctx, 0, -1)
		require.NoError(t, err)
		assert.False(t, ok, other.Field())
		err = other.Unlock(ctx)
		require.ErrorIs(t, err, ErrIllegalMonitorState)
		assert.Contains(t, err.Error(), "thread-id: ")
		held, err := other.IsHeldByCurrentThread(ctx)
		require.NoError(t, err)
		assert.False(t, held)
	}
	locked, err := otherJVM.IsLocked(ctx)
	require.NoError(t, err)
	assert.True(t, locked)

	for want := 2; want >= 0; want-- {
		require.NoError(t, mine.Unlock(ctx))
		n, err := mine.HoldCount(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, n)
	}
	require.ErrorIs(t, mine.Unlock(ctx), ErrIllegalMonitorState)
	ok, err := otherJVM.TryLock(ctx, 0, -1)
	require.NoError(t, err)
	assert.True(t, ok)
	require.NoError(t, otherJVM.Unlock(ctx))
}

// TestUnlockLatchMakesRetriesIdempotent: an unlock retried under the same request id (what
// Redisson's retries send) gets the first reply back instead of releasing a second hold.
func TestUnlockLatchMakesRetriesIdempotent(t *testing.T) {
	r, a, _ := twoInstances(t, Options{})
	ctx := t.Context()
	l := a.Lock("latched", 1)
	for range 2 {
		ok, err := l.TryLock(ctx, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
	}
	for range 2 {
		o, err := l.proto.unlock(ctx, l, "same-request")
		require.NoError(t, err)
		assert.Equal(t, unlockStillHeld, o)
	}
	n, err := l.HoldCount(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the retry released nothing")
	assert.Equal(t, "0", r.MustDo(t, "GET", "redisson_unlock_latch:{latched}:same-request"))
}

// TestMutualExclusion: goroutines of two instances increment a counter under one lock; no two are
// ever inside at once and no increment is lost. Every hold is on the watchdog and every wait
// follows Java's (subscribe, retry, block on the latch).
func TestMutualExclusion(t *testing.T) {
	r, a, b := twoInstances(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const workers, rounds = 4, 15
	var inside, overlaps, counter atomic.Int64
	errs := make(chan error, 2*workers)
	var wg sync.WaitGroup
	for _, c := range []*Client{a, b} {
		for w := range workers {
			wg.Go(func() {
				l := c.Lock("counter", int64(w)) // the same thread ids in both instances: distinct fields
				for range rounds {
					if err := l.Lock(ctx); err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					// A read-modify-write over two round trips: overlapping holders lose updates.
					if err := incr(ctx, c, "counter:value"); err != nil {
						errs <- err
						return
					}
					counter.Add(1)
					inside.Add(-1)
					if err := l.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Zero(t, overlaps.Load(), "overlapping holds")
	assert.Equal(t, int64(2*workers*rounds), counter.Load())
	assert.Equal(t, strconv.Itoa(2*workers*rounds), r.MustDo(t, "GET", "counter:value"), "no update lost")
	for _, c := range []*Client{a, b} {
		held, running := c.renewal.locks.watching("counter")
		assert.False(t, held || running, "watchdog idle after the last unlock")
	}
}

// incr adds 1 to the integer at key by GET then SET, not atomically.
func incr(ctx context.Context, c *Client, key string) error {
	n, err := c.rc.Do(ctx, c.rc.B().Get().Key(key).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	return c.rc.Do(ctx, c.rc.B().Set().Key(key).Value(strconv.FormatInt(n+1, 10)).Build()).Error()
}

// TestForceUnlockWakesWaiter: forceUnlock deletes another instance's hold and publishes 0, which
// wakes a waiter blocked on the holder's 30 s TTL.
func TestForceUnlockWakesWaiter(t *testing.T) {
	r, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	holder := a.Lock("forced", 1)
	ok, err := holder.TryLock(ctx, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok)

	waiter := b.Lock("forced", 1)
	delay := wakeDelay(t, b, lockChannel("forced"), waiter.Lock, func() error {
		ok, err := b.Lock("forced", 2).ForceUnlock(ctx)
		if err == nil {
			assert.True(t, ok)
		}
		return err
	})
	t.Logf("forceUnlock -> waiter holds the lock: %v (holder's TTL was 30 s)", delay)
	assert.Less(t, delay, 5*time.Second)
	assert.Equal(t, b.ID()+":1\n1", r.MustDo(t, "HGETALL", "forced"))
	require.ErrorIs(t, holder.Unlock(ctx), ErrIllegalMonitorState)
	require.NoError(t, waiter.Unlock(ctx))

	ok, err = holder.ForceUnlock(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "nothing left to delete")
}

// TestTryLockWaitRunsOut: a try with a wait gives up after it, having subscribed and
// unsubscribed (no subscription is left on the server).
func TestTryLockWaitRunsOut(t *testing.T) {
	r, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	ok, err := a.Lock("busy", 1).TryLock(ctx, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok)

	start := time.Now()
	ok, err = b.Lock("busy", 1).TryLock(ctx, 200*time.Millisecond, -1)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	assert.Eventually(t, func() bool {
		out, err := r.Do("PUBSUB", "NUMSUB", lockChannel("busy"))
		return err == nil && strings.HasSuffix(out, "\n0")
	}, 5*time.Second, 5*time.Millisecond, "the channel was unsubscribed")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ok, err = b.Lock("busy", 1).TryLock(cctx, time.Second, -1)
	assert.False(t, ok)
	require.ErrorIs(t, err, context.Canceled)
}
