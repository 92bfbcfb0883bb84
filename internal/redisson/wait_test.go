package redisson

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// TestUnlockMessageWakesWaiter: a waiter of another instance, blocked on the holder's 30 s TTL,
// takes the lock milliseconds after the holder's unlock publishes 0.
func TestUnlockMessageWakesWaiter(t *testing.T) {
	_, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	var delays []time.Duration
	for range 5 {
		holder := a.Lock("wake", 1)
		ok, err := holder.TryLock(ctx, 0, 30*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		waiter := b.Lock("wake", 1)
		delays = append(delays, wakeDelay(t, b, lockChannel("wake"), waiter.Lock, func() error { return holder.Unlock(ctx) }))
		require.NoError(t, waiter.Unlock(ctx))
	}
	t.Logf("RLock unlock -> waiter of the other instance holds the lock (min / median / max of %d): %s",
		len(delays), summary(delays))
	for _, d := range delays {
		assert.Less(t, d, 5*time.Second, "woken by the message, not by the 30 s TTL")
	}
}

// TestTryLockWaiterWokenByMessage: TryLock with a wait blocks min(holder's TTL, wait left) per
// round and is woken by the message as well.
func TestTryLockWaiterWokenByMessage(t *testing.T) {
	_, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	holder := a.Lock("trywake", 1)
	ok, err := holder.TryLock(ctx, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	waiter := b.Lock("trywake", 1)
	delay := wakeDelay(t, b, lockChannel("trywake"), func(ctx context.Context) error {
		ok, err := waiter.TryLock(ctx, 20*time.Second, 5*time.Second)
		if err == nil && !ok {
			err = errors.New("TryLock gave up")
		}
		return err
	}, func() error { return holder.Unlock(ctx) })
	t.Logf("RLock unlock -> TryLock(wait 20 s) waiter holds the lock: %v", delay)
	assert.Less(t, delay, 5*time.Second)
	require.NoError(t, waiter.Unlock(ctx))
}

// TestReadWriteMessagesWake: a write unlock publishes 1, which wakes every blocked reader of an
// instance at once; a read unlock that empties the lock publishes 0, which wakes a writer.
func TestReadWriteMessagesWake(t *testing.T) {
	_, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	channel := rwlockChannel("rw")

	writer := a.ReadWriteLock("rw").WriteLock(1)
	ok, err := writer.TryLock(ctx, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	readers := []*Lock{b.ReadWriteLock("rw").ReadLock(1), b.ReadWriteLock("rw").ReadLock(2)}
	type result struct {
		at  time.Time
		err error
	}
	done := make(chan result, len(readers))
	for _, r := range readers {
		go func() {
			err := r.Lock(ctx)
			done <- result{time.Now(), err}
		}()
	}
	harness.Eventually(t, 10*time.Second, "both readers blocked", func() bool { return blockedWaits(b, channel) == 2 })
	start := time.Now()
	require.NoError(t, writer.Unlock(ctx))
	for range readers {
		select {
		case r := <-done:
			require.NoError(t, r.err)
			t.Logf("write unlock (message 1) -> reader holds the read lock: %v", r.at.Sub(start))
			assert.Less(t, r.at.Sub(start), 5*time.Second)
		case <-time.After(20 * time.Second):
			t.Fatal("a reader was not woken by the write unlock")
		}
	}

	// The readers hold with a 30 s watchdog lease; a writer of the other instance waits for both.
	waiter := a.ReadWriteLock("rw").WriteLock(3)
	require.NoError(t, readers[0].Unlock(ctx))
	delay := wakeDelay(t, a, channel, waiter.Lock, func() error { return readers[1].Unlock(ctx) })
	t.Logf("last read unlock (message 0) -> writer holds the write lock: %v", delay)
	assert.Less(t, delay, 5*time.Second)
	require.NoError(t, waiter.Unlock(ctx))
}

// TestCloseEndsWaits: a wait in progress fails with ErrClosed when its Client closes.
func TestCloseEndsWaits(t *testing.T) {
	_, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	ok, err := a.Lock("closing", 1).TryLock(ctx, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	done := make(chan error, 1)
	go func() { done <- b.Lock("closing", 1).Lock(ctx) }()
	harness.Eventually(t, 10*time.Second, "the wait to block", func() bool {
		return blockedWaits(b, lockChannel("closing")) == 1
	})
	b.Close()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the wait")
	}
}

// TestSharedConnectionResubscribes: two Clients on one rueidis client share its connection, where
// one's UNSUBSCRIBE ends the other's subscription too. The other subscribes again (waking its
// waits to re-check) and still hears the next release.
func TestSharedConnectionResubscribes(t *testing.T) {
	r := harness.NewRedis(t, harness.RedisOptions{})
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true, ForceSingleClient: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	a, b := New(rc, Options{}), New(rc, Options{})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	ctx := t.Context()
	channel := lockChannel("shared")

	holder := newClient(t, []string{r.Addr}, Options{}).Lock("shared", 1)
	ok, err := holder.TryLock(ctx, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok)

	waiter := a.Lock("shared", 1)
	done := make(chan error, 1)
	go func() { done <- waiter.Lock(ctx) }()
	harness.Eventually(t, 10*time.Second, "a's wait to block", func() bool { return blockedWaits(a, channel) == 1 })
	a.subs.mu.Lock()
	entry := a.subs.entries[channel]
	a.subs.mu.Unlock()

	// b waits in vain and unsubscribes the channel, on the connection a subscribed it on.
	ok, err = b.Lock("shared", 1).TryLock(ctx, 50*time.Millisecond, -1)
	require.NoError(t, err)
	require.False(t, ok)
	harness.Eventually(t, 10*time.Second, "b's subscription to end", func() bool {
		b.subs.mu.Lock()
		defer b.subs.mu.Unlock()
		return len(b.subs.entries) == 0 && len(b.subs.leaving) == 0
	})
	harness.Eventually(t, 10*time.Second, "a to subscribe again and block", func() bool {
		out, err := r.Do("PUBSUB", "NUMSUB", channel)
		return err == nil && out == channel+"\n1" && blockedWaits(a, channel) == 1
	})
	assert.GreaterOrEqual(t, entry.resubscribed.Load(), int64(1), "a's subscription was ended and made again")
	start := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("a's wait was not woken by the unlock")
	}
	delay := time.Since(start)
	t.Logf("after a shared connection's UNSUBSCRIBE: unlock -> waiter holds the lock: %v", delay)
	assert.Less(t, delay, 5*time.Second)
	require.NoError(t, waiter.Unlock(ctx))
}
