package interop

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/redisson"
	"github.com/leasegate/leasegate/internal/testkit"
)

// wakeupRounds is how many hand-overs each direction of TestWakeupDelays measures.
const wakeupRounds = 20

// TestWakeupDelays measures how soon each side gets the lock after the other side's release, with
// holds whose TTL is 30 s (so an expiry cannot be what wakes anyone): a gateway long-poll after a
// Redisson unlock, and a Redisson tryLock after a gateway release. It logs the median, p90 and
// the slowest, and fails only on a delay that only an expiry or a lost message would explain
// (docs/redisson.md records the figures).
func TestWakeupDelays(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	l := w.jvm(t, redisson.Options{}).Lock("rs.wakeup", 1)

	var toGateway, toRedisson []time.Duration
	for range wakeupRounds {
		ok, err := l.TryLock(ctx, 5*time.Second, 30*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		waiting := testkit.StartWaiter(w.Client, ctx, "rs.wakeup", "web", 30_000, 20_000)
		testkit.EventuallyPaced(t, 10*time.Second, "the gateway waiter in line", func() bool { return w.Waiters(t, "rs.wakeup") == 1 })
		unlocked := time.Now()
		require.NoError(t, l.Unlock(ctx))
		g := testkit.Receive(t, waiting, 15*time.Second, "the gateway waiter")
		require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
		toGateway = append(toGateway, time.Since(unlocked))

		done := make(chan time.Time, 1)
		go func() {
			ok, err := l.TryLock(ctx, 20*time.Second, 30*time.Second)
			if err != nil || !ok {
				t.Errorf("Redisson's tryLock: %v %v", ok, err)
			}
			done <- time.Now()
		}()
		awaitRedissonSubscriber(t, w, "redisson_lock__channel:{rs.wakeup}")
		released := time.Now()
		w.release(t, "rs.wakeup", g)
		got := testkit.Receive(t, done, 15*time.Second, "Redisson's tryLock")
		toRedisson = append(toRedisson, got.Sub(released))
		require.NoError(t, l.Unlock(ctx))
	}
	for _, d := range []struct {
		what string
		ds   []time.Duration
	}{{"Redisson unlock -> gateway 201", toGateway}, {"gateway release -> Redisson tryLock", toRedisson}} {
		slices.Sort(d.ds)
		t.Logf("wake-up %s (%d rounds, TTL 30 s): median %v, p90 %v, slowest %v", d.what, len(d.ds),
			d.ds[len(d.ds)/2].Round(100*time.Microsecond), d.ds[len(d.ds)*9/10].Round(100*time.Microsecond),
			d.ds[len(d.ds)-1].Round(100*time.Microsecond))
		within(t, d.ds[len(d.ds)-1], 2*time.Second, d.what)
	}
}
