package redisson

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tryOnce is TryLock without a wait, with a 30 s lease: it reports whether l was taken.
func tryOnce(t *testing.T, l *Lock) bool {
	t.Helper()
	ok, err := l.TryLock(t.Context(), 0, 30*time.Second)
	require.NoError(t, err)
	return ok
}

func isLocked(t *testing.T, l *Lock) bool {
	t.Helper()
	locked, err := l.IsLocked(t.Context())
	require.NoError(t, err)
	return locked
}

// TestReadersShareWriterExcludes: readers of both instances share the lock and keep writers out
// (also a reader's own thread: no upgrade); a writer keeps out every other thread's readers and
// writers.
func TestReadersShareWriterExcludes(t *testing.T) {
	r, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	ra, rb := a.ReadWriteLock("doc").ReadLock(1), b.ReadWriteLock("doc").ReadLock(1)
	require.True(t, tryOnce(t, ra))
	require.True(t, tryOnce(t, rb))
	assert.Equal(t, "read", r.MustDo(t, "HGET", "doc", "mode"))
	assert.Equal(t, "1", r.MustDo(t, "GET", "{doc}:"+ra.Field()+":rwlock_timeout:1"))
	assert.True(t, isLocked(t, ra))
	assert.False(t, isLocked(t, a.ReadWriteLock("doc").WriteLock(1)), "the write lock is not locked")

	for _, w := range []*Lock{a.ReadWriteLock("doc").WriteLock(1), b.ReadWriteLock("doc").WriteLock(2)} {
		assert.False(t, tryOnce(t, w), "writer %s while read-locked", w.Field())
	}
	require.NoError(t, ra.Unlock(ctx))
	assert.False(t, tryOnce(t, b.ReadWriteLock("doc").WriteLock(2)), "one reader is left")
	require.NoError(t, rb.Unlock(ctx))
	assert.Equal(t, "0", r.MustDo(t, "EXISTS", "doc"))

	w := a.ReadWriteLock("doc").WriteLock(1)
	require.True(t, tryOnce(t, w))
	require.True(t, tryOnce(t, w), "the writer re-enters")
	assert.Equal(t, "write", r.MustDo(t, "HGET", "doc", "mode"))
	n, err := w.HoldCount(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, "2", r.MustDo(t, "HGET", "doc", a.ID()+":1:write"))
	for _, other := range []*Lock{
		a.ReadWriteLock("doc").ReadLock(2), b.ReadWriteLock("doc").ReadLock(1),
		a.ReadWriteLock("doc").WriteLock(2), b.ReadWriteLock("doc").WriteLock(1),
	} {
		assert.False(t, tryOnce(t, other), "%s while write-locked", other.Field())
	}
	assert.True(t, isLocked(t, w))
	require.NoError(t, w.Unlock(ctx))
	require.NoError(t, w.Unlock(ctx))
	require.ErrorIs(t, w.Unlock(ctx), ErrIllegalMonitorState)
	assert.Equal(t, "0", r.MustDo(t, "EXISTS", "doc"))
}

// TestWriteThenReadDowngrade: the write holder's thread may take the read lock; after the write
// unlock the lock stays in read mode with that reader, other readers come in, writers do not.
func TestWriteThenReadDowngrade(t *testing.T) {
	r, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	w, rd := a.ReadWriteLock("cfg").WriteLock(1), a.ReadWriteLock("cfg").ReadLock(1)
	require.True(t, tryOnce(t, w))
	require.True(t, tryOnce(t, rd), "downgrade: the writer's thread reads")
	assert.False(t, tryOnce(t, a.ReadWriteLock("cfg").ReadLock(2)), "another thread may not read yet")

	require.NoError(t, w.Unlock(ctx))
	assert.Equal(t, "read", r.MustDo(t, "HGET", "cfg", "mode"), "the last write unlock with readers left flips the mode")
	other := b.ReadWriteLock("cfg").ReadLock(1)
	require.True(t, tryOnce(t, other))
	assert.False(t, tryOnce(t, b.ReadWriteLock("cfg").WriteLock(2)))

	require.NoError(t, rd.Unlock(ctx))
	require.NoError(t, other.Unlock(ctx))
	assert.Empty(t, r.MustDo(t, "KEYS", "*"))
}

// TestReadWriteForceUnlock: each half force-unlocks only its own mode.
func TestReadWriteForceUnlock(t *testing.T) {
	r, a, b := twoInstances(t, Options{})
	ctx := t.Context()
	require.True(t, tryOnce(t, a.ReadWriteLock("f").ReadLock(1)))
	ok, err := b.ReadWriteLock("f").WriteLock(1).ForceUnlock(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "the write half does not delete readers")
	ok, err = b.ReadWriteLock("f").ReadLock(1).ForceUnlock(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "0", r.MustDo(t, "EXISTS", "f"))

	w := a.ReadWriteLock("f").WriteLock(1)
	require.True(t, tryOnce(t, w))
	waiter := b.ReadWriteLock("f").ReadLock(1)
	delay := wakeDelay(t, b, rwlockChannel("f"), waiter.Lock, func() error {
		ok, err := b.ReadWriteLock("f").WriteLock(2).ForceUnlock(ctx)
		if err == nil && !ok {
			err = errors.New("the force unlock deleted nothing")
		}
		return err
	})
	t.Logf("write-lock forceUnlock (message 1) -> reader holds the read lock: %v", delay)
	assert.Less(t, delay, 5*time.Second)
	require.NoError(t, waiter.Unlock(ctx))
}
