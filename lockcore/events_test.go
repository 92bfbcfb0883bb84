package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// A key prefix with whitespace or a control character would split the pub/sub messages that
// carry lock keys (every live event would be dropped): New refuses it, before touching Redis.
func TestNewRejectsKeyPrefixesThatBreakEvents(t *testing.T) {
	tokens, err := lockcore.NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	for _, prefix := range []string{"my app:", "app\t", "app\n", "app\x01:", "app\u00a0:", "a{b", "a}"} {
		_, err := lockcore.New(nil, tokens, lockcore.Options{KeyPrefix: prefix})
		assert.ErrorIs(t, err, lockcore.ErrInvalid, "%q", prefix)
	}
}

// TestStreamDoesNotTakeAHoldPastTheFirst100ForGone: a state lists the first 100 shared holds (in
// expiry order). A hold renewed without a message (as the watchdog renews) past them must not be
// reported expired by a stream that knew it (nor its lease lost, for the stream of its token)
// while Redis still has it.
func TestStreamDoesNotTakeAHoldPastTheFirst100ForGone(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	acquire := func(owner string, ttl time.Duration) lockcore.Grant {
		g, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "big", Kind: lockcore.KindSemaphore, Permits: 200, Owner: owner, TTL: ttl})
		require.NoError(t, err)
		return g
	}
	for i := range 101 {
		acquire(fmt.Sprintf("o%d", i), time.Minute)
	}
	a := acquire("a", 2*time.Second) // granted last, its hold runs out first
	ref := lockcore.SemaphoreRef("big")
	mine, err := w.svc.Watch(ctx, ref, a.Token)
	require.NoError(t, err)
	defer mine.Close()
	other, err := w.svc.Watch(ctx, ref, "")
	require.NoError(t, err)
	defer other.Close()
	for _, st := range []*lockcore.Stream{mine, other} {
		ev := next(t, st)
		require.Equal(t, lockcore.EventState, ev.Type)
		require.Len(t, ev.State.Shared, 100)
		require.Equal(t, "a", ev.State.Shared[0].Owner, "a is listed, first")
	}

	// a's hold now runs out in 2 minutes, behind the other 101: no longer listed.
	sh := w.key("big", ":sem:sh")
	score, err := strconv.ParseInt(w.redis.MustDo(t, "ZSCORE", sh, a.ID), 10, 64)
	require.NoError(t, err)
	w.redis.MustDo(t, "ZADD", sh, "XX", strconv.FormatInt(score+2*60*1000, 10), a.ID)

	quiet := func(st *lockcore.Stream, d time.Duration) {
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		ev, err := st.Next(c)
		require.ErrorIs(t, err, context.DeadlineExceeded, "no event, got %s %+v", ev.Type, ev)
	}
	quiet(mine, 3500*time.Millisecond) // past a's first expiry: the stream has checked
	quiet(other, 100*time.Millisecond)
}
