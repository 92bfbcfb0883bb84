package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// next returns the stream's next event within 10 s.
func next(t *testing.T, st *lockcore.Stream) lockcore.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := st.Next(ctx)
	require.NoError(t, err)
	return ev
}

// TestStreamResyncsWhenItFallsBehind: a stream whose reader does not keep up loses messages (the
// subscription's reader never waits for it) and then reports a fresh state instead of guessing;
// what it reports before and after is still in Redis's order, and nothing twice.
func TestStreamResyncsWhenItFallsBehind(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	ref := lockcore.LockRef("busy")
	st, err := w.svc.Watch(ctx, ref, "")
	require.NoError(t, err)
	defer st.Close()
	require.Equal(t, lockcore.EventState, next(t, st).Type)

	const cycles = 400 // 800 events, more than a stream buffers
	var last lockcore.Grant
	for range cycles {
		last = w.hold(t, w.svc, "busy", "o", time.Minute)
		_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: ref, Token: last.Token})
		require.NoError(t, err)
	}
	marker := w.hold(t, w.svc, "busy", "marker", time.Minute)

	var fence int64
	states := 0
	granted := map[int64]bool{}
	for {
		ev := next(t, st)
		switch ev.Type {
		case lockcore.EventState:
			states++
			if ev.State.Exclusive != nil {
				fence = ev.State.Exclusive.Fence
			}
		case lockcore.EventGranted:
			require.Greater(t, ev.Hold.Fence, fence, "in order")
			require.False(t, granted[ev.Hold.Fence], "at most once")
			granted[ev.Hold.Fence] = true
			fence = ev.Hold.Fence
		}
		if fence == marker.Fence {
			break
		}
	}
	assert.Positive(t, states, "the stream fell behind and resynced")
	assert.Less(t, len(granted), cycles+1, "what it missed is not replayed")
}

// TestStreamEndsWithTheService: Close ends every stream (their keepers included: the package's
// goleak check fails on a goroutine left behind).
func TestStreamEndsWithTheService(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	other := w.replica(t, lockcore.Options{})
	g := w.hold(t, other, "x", "a", time.Minute)
	st, err := w.svc.Watch(context.Background(), lockcore.LockRef("x"), g.Token)
	require.NoError(t, err)
	ev := next(t, st)
	require.Equal(t, lockcore.EventState, ev.Type)
	require.NotNil(t, ev.State.Yours)
	assert.True(t, *ev.State.Yours)
	w.svc.Close()
	_, err = st.Next(context.Background())
	assert.True(t, errors.Is(err, lockcore.ErrShuttingDown), "%v", err)
	st.Close()
	_, err = w.svc.Watch(context.Background(), lockcore.LockRef("x"), "")
	assert.True(t, errors.Is(err, lockcore.ErrShuttingDown), "%v", err)
	assert.Equal(t, "0", w.redis.MustDo(t, "EXISTS", w.key("x", ":watch")), "the closing replica stopped watching")
}
