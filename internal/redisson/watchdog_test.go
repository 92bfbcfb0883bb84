package redisson

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// watchdogTimeout is the tests' lockWatchdogTimeout: renewals every 300 ms instead of 10 s.
const watchdogTimeout = 900 * time.Millisecond

// holdFor checks every 50 ms, for span, that alive holds; it fails t at the first check that does not.
func holdFor(t *testing.T, span time.Duration, what string, alive func() bool) {
	t.Helper()
	for deadline := time.Now().Add(span); time.Now().Before(deadline); {
		require.True(t, alive(), what)
		<-time.After(50 * time.Millisecond) // the pace of the checks, not synchronisation
	}
}

// TestWatchdogKeepsLock: a hold taken without a lease outlives several watchdog timeouts, other
// instances stay out, and the watchdog stops at the unlock.
func TestWatchdogKeepsLock(t *testing.T) {
	t.Parallel()
	r, a, b := twoInstances(t, Options{WatchdogTimeout: watchdogTimeout})
	ctx := t.Context()
	l := a.Lock("kept", 1)
	require.NoError(t, l.Lock(ctx))
	start := time.Now()
	holdFor(t, 4*watchdogTimeout, "the lock held and its TTL renewed", func() bool {
		ttl, err := l.RemainTimeToLive(ctx)
		return err == nil && ttl > 0 && ttl <= watchdogTimeout.Milliseconds()
	})
	ok, err := b.Lock("kept", 1).TryLock(ctx, 0, -1)
	require.NoError(t, err)
	assert.False(t, ok, "still held after %v", time.Since(start))
	a.renewal.locks.mu.Lock()
	rounds := a.renewal.locks.rounds
	a.renewal.locks.mu.Unlock()
	assert.GreaterOrEqual(t, rounds, 4, "renewed at least once per timeout lived")
	t.Logf("held %v with a %v watchdog timeout, %d renewal rounds", time.Since(start), watchdogTimeout, rounds)

	require.NoError(t, l.Unlock(ctx))
	held, running := a.renewal.locks.watching("kept")
	assert.False(t, held, "the name left the watchdog")
	assert.False(t, running, "the watchdog goroutine stopped")
	assert.Equal(t, "0", r.MustDo(t, "EXISTS", "kept"))
}

// TestWatchdogStopsWhenLockIsGone: when the renewal script finds the hold gone (reply 0, here
// after another instance's forceUnlock), the watchdog drops it, and so does not extend the next
// holder's lease.
func TestWatchdogStopsWhenLockIsGone(t *testing.T) {
	t.Parallel()
	_, a, b := twoInstances(t, Options{WatchdogTimeout: watchdogTimeout})
	ctx := t.Context()
	require.NoError(t, a.Lock("gone", 1).Lock(ctx))
	ok, err := b.Lock("gone", 9).ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	harness.Eventually(t, 5*time.Second, "the watchdog to drop the lost hold", func() bool {
		held, running := a.renewal.locks.watching("gone")
		return !held && !running
	})

	// A hold with an explicit lease is never renewed: it expires.
	next := b.Lock("gone", 2)
	ok, err = next.TryLock(ctx, 0, 400*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	held, _ := b.renewal.locks.watching("gone")
	assert.False(t, held, "a leased hold is not on the watchdog")
	harness.Eventually(t, 5*time.Second, "the leased hold to expire", func() bool {
		locked, err := next.IsLocked(ctx)
		return err == nil && !locked
	})
}

// TestWatchdogRenewsReadHolds: ReadLockTask renews the hash and every read-hold key of the
// instance's readers, so reentrant read holds outlive several timeouts; it stops at the last unlock.
func TestWatchdogRenewsReadHolds(t *testing.T) {
	t.Parallel()
	r, a, _ := twoInstances(t, Options{WatchdogTimeout: watchdogTimeout})
	ctx := t.Context()
	rw := a.ReadWriteLock("reads")
	r1, r2 := rw.ReadLock(1), rw.ReadLock(2)
	require.NoError(t, r1.Lock(ctx))
	require.NoError(t, r1.Lock(ctx))
	require.NoError(t, r2.Lock(ctx))
	holdKeys := []string{
		"{reads}:" + r1.Field() + ":rwlock_timeout:1",
		"{reads}:" + r1.Field() + ":rwlock_timeout:2",
		"{reads}:" + r2.Field() + ":rwlock_timeout:1",
	}
	holdFor(t, 4*watchdogTimeout, "the read holds and the hash alive", func() bool {
		for _, k := range append([]string{"reads"}, holdKeys...) {
			if ttl, err := r.Do("PTTL", k); err != nil || ttl == "-2" || ttl == "-1" {
				return false
			}
		}
		return true
	})
	n, err := r1.HoldCount(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	require.NoError(t, r1.Unlock(ctx))
	require.NoError(t, r1.Unlock(ctx))
	held, _ := a.renewal.reads.watching("reads")
	assert.True(t, held, "thread 2 still reads")
	require.NoError(t, r2.Unlock(ctx))
	held, running := a.renewal.reads.watching("reads")
	assert.False(t, held || running, "the read watchdog stopped")
	assert.Empty(t, r.MustDo(t, "KEYS", "*"))
}
