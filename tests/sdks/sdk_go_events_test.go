package sdks

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	leasegate "github.com/leasegate/leasegate/sdk/go"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// waitDone waits up to timeout for done and returns how long after since it was closed.
func waitDone(t *testing.T, done <-chan struct{}, since time.Time, timeout time.Duration, what string) time.Duration {
	t.Helper()
	select {
	case <-done:
		return time.Since(since)
	case <-time.After(timeout):
		require.FailNow(t, "Done not closed", "%s: not within %v", what, timeout)
		return 0
	}
}

// lostWithin is how soon after a force release's answer a watched lease must be told (#27).
const lostWithin = 100 * time.Millisecond

// forceRelease force-releases path (/locks/NAME or /semaphores/NAME) on e's gateway and returns
// when its answer came.
func forceRelease(t *testing.T, e *testkit.Env, path string) time.Time {
	t.Helper()
	r := e.Client.Do(http.MethodDelete, path+"?force=true", nil, "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	return time.Now()
}

// TestGoSDKDoneClosesAtOnceOnForceRelease: a kept-alive lease watches its events stream, and a
// force release closes Done within 100 ms of its answer (the renewal would come 10 s later), with
// Err saying it was forced.
func TestGoSDKDoneClosesAtOnceOnForceRelease(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	lease, err := sdk.Lock(ctx, "forced", leasegate.LockOptions{Owner: "worker", TTL: 30 * time.Second})
	require.NoError(t, err)
	assert.False(t, lease.Watching(), "not watched before KeepAlive (WatchKept)")
	lease.KeepAlive()
	harness.Eventually(t, 10*time.Second, "the events stream to open", lease.Watching)

	answered := forceRelease(t, e, "/locks/forced")
	took := waitDone(t, lease.Done(), answered, 5*time.Second, "force release")
	t.Logf("Done closed %v after the force release's answer", took)
	assert.Less(t, took, lostWithin, "Done within 100 ms of the force release's answer")

	err = lease.Err()
	assert.ErrorIs(t, err, leasegate.ErrLeaseForced)
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone)
	assert.NotErrorIs(t, err, leasegate.ErrLeaseExpired)
	var lost *leasegate.LostError
	require.ErrorAs(t, err, &lost)
	assert.Equal(t, leasegate.EndForced, lost.Reason)
	assert.Equal(t, "forced", lost.Lock)
	assert.Equal(t, lease.Fence, lost.Fence)
	assert.False(t, lost.At.IsZero(), "the gateway said when")
	assert.Equal(t, leasegate.EndForced, lease.EndReason())
	assert.ErrorIs(t, context.Cause(lease.Context()), leasegate.ErrLeaseForced)
	assert.False(t, lease.Watching())

	_, err = lease.Release(ctx)
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone)
	assert.ErrorIs(t, lease.Err(), leasegate.ErrLeaseForced, "the first reason stays")
}

// TestGoSDKDoneClosesOnExpiry: a watchdog lease is watched from its grant; when the gateway
// stops renewing it (max hold) and it runs out, Done closes with ErrLeaseExpired, once the lock
// is free and not before. (A lease the SDK itself stops renewing ends earlier, locally, with
// ErrLeaseLapsing: see TestGoSDKKeepAliveAndDone.)
func TestGoSDKDoneClosesOnExpiry(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	lease, err := sdk.Lock(ctx, "expiring", leasegate.LockOptions{Owner: "worker", TTL: time.Second, Watchdog: true, MaxHold: time.Second})
	require.NoError(t, err)
	harness.Eventually(t, 10*time.Second, "the events stream to open", lease.Watching)

	// Poll the lock alongside: the last remaining TTL seen, counted from when its request was
	// sent, is when the lease runs out on the gateway (give or take a few ms).
	var expiresAt atomic.Int64
	stopPolling := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stopPolling:
				return
			case <-time.After(5 * time.Millisecond):
			}
			sent := time.Now()
			if st, err := sdk.Inspect(ctx, "expiring", ""); err == nil && st.Held && st.TtlMs != nil {
				expiresAt.Store(sent.Add(time.Duration(*st.TtlMs) * time.Millisecond).UnixNano())
			}
		}
	}()
	start := time.Now()
	waitDone(t, lease.Done(), start, 15*time.Second, "expiry")
	doneAt := time.Now()
	close(stopPolling)
	<-polled
	st, err := sdk.Inspect(ctx, "expiring", lease.Token)
	require.NoError(t, err)

	assert.False(t, *st.Yours, "the lease had run out when Done closed")
	assert.ErrorIs(t, lease.Err(), leasegate.ErrLeaseExpired)
	assert.ErrorIs(t, lease.Err(), leasegate.ErrLeaseGone)
	assert.Equal(t, leasegate.EndExpired, lease.EndReason())
	require.NotZero(t, expiresAt.Load(), "the lock was seen held")
	late := doneAt.Sub(time.Unix(0, expiresAt.Load()))
	t.Logf("Done closed %v after the grant, %v after the lease ran out on the gateway", doneAt.Sub(start), late)
	assert.Less(t, late, 500*time.Millisecond)
	assert.Greater(t, late, -50*time.Millisecond, "not before it ran out")
}

// TestGoSDKReleaseEndsTheWatchAsReleased: the lease's own release closes Done with ErrReleased,
// never as a loss, and closes its events stream.
func TestGoSDKReleaseEndsTheWatchAsReleased(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	p := testkit.NewStreamProxy(t, e.Gateway.URL)
	ctx := context.Background()
	sdk, err := leasegate.New(p.Server.URL)
	require.NoError(t, err)

	lease, err := sdk.Lock(ctx, "mine", leasegate.LockOptions{Owner: "worker", TTL: 30 * time.Second, WatchLoss: leasegate.WatchAlways})
	require.NoError(t, err)
	harness.Eventually(t, 10*time.Second, "the events stream to open", lease.Watching)
	require.NoError(t, lease.Reenter(ctx, 0))
	released, err := lease.Release(ctx)
	require.NoError(t, err)
	require.False(t, released)
	assert.NoError(t, lease.Err(), "one of two holds given back")

	released, err = lease.Release(ctx)
	require.NoError(t, err)
	require.True(t, released)
	waitDone(t, lease.Done(), time.Now(), time.Second, "release")
	assert.ErrorIs(t, lease.Err(), leasegate.ErrReleased)
	assert.NotErrorIs(t, lease.Err(), leasegate.ErrLeaseGone)
	assert.Equal(t, leasegate.EndReleased, lease.EndReason())
	harness.Eventually(t, 5*time.Second, "the events stream to close", func() bool { return p.Active.Load() == 0 })
	assert.Equal(t, int64(1), p.Opened.Load(), "one stream, never reopened")

	// WatchNever: KeepAlive renews, and opens no stream.
	quiet, err := sdk.Lock(ctx, "quiet", leasegate.LockOptions{Owner: "worker", TTL: 30 * time.Second, WatchLoss: leasegate.WatchNever})
	require.NoError(t, err)
	quiet.KeepAlive()
	_, err = quiet.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), p.Opened.Load(), "no stream for WatchNever")
}

// TestGoSDKWatchReconnects cuts the lease's events stream: the SDK reopens it (which checks that
// the lease survived the gap) and still learns of a force release at once; and when the lease is
// forced while the stream is down, the reopening finds it gone.
func TestGoSDKWatchReconnects(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	p := testkit.NewStreamProxy(t, e.Gateway.URL)
	ctx := context.Background()
	sdk, err := leasegate.New(p.Server.URL)
	require.NoError(t, err)

	lease, err := sdk.Lock(ctx, "cut", leasegate.LockOptions{Owner: "worker", TTL: 30 * time.Second})
	require.NoError(t, err)
	lease.KeepAlive()
	harness.Eventually(t, 10*time.Second, "the events stream to open", lease.Watching)
	p.Server.CloseClientConnections()
	harness.Eventually(t, 10*time.Second, "the events stream to be reopened", func() bool { return p.Opened.Load() == 2 })
	harness.Eventually(t, 10*time.Second, "the reopened stream's first event", lease.Watching)
	require.NoError(t, lease.Err(), "a cut stream is no loss")
	answered := forceRelease(t, e, "/locks/cut")
	took := waitDone(t, lease.Done(), answered, 5*time.Second, "force release after a reconnection")
	t.Logf("after a reconnection, Done closed %v after the force release's answer", took)
	assert.Less(t, took, lostWithin)
	assert.ErrorIs(t, lease.Err(), leasegate.ErrLeaseForced)

	// Forced while the stream is down: the events are gone, the reopening tells.
	gap, err := sdk.Lock(ctx, "gap", leasegate.LockOptions{Owner: "worker", TTL: 30 * time.Second})
	require.NoError(t, err)
	gap.KeepAlive()
	harness.Eventually(t, 10*time.Second, "the events stream to open", gap.Watching)
	p.Blocked.Store(true)
	p.Server.CloseClientConnections()
	harness.Eventually(t, 10*time.Second, "the stream to be down", func() bool { return !gap.Watching() })
	forceRelease(t, e, "/locks/gap")
	require.NoError(t, gap.Err(), "nothing told yet")
	reopened := time.Now()
	p.Blocked.Store(false)
	took = waitDone(t, gap.Done(), reopened, 8*time.Second, "a reopening after the gap")
	t.Logf("Done closed %v after the stream could be reopened (reconnection back-off included)", took)
	var lost *leasegate.LostError
	require.ErrorAs(t, gap.Err(), &lost, "the stream found it gone, not a renewal: %v", gap.Err())
	assert.Equal(t, leasegate.EndGone, lost.Reason)
	var problem *leasegate.ProblemError
	require.ErrorAs(t, lost.Err, &problem)
	assert.Equal(t, http.StatusGone, int(problem.Status))
	assert.ErrorIs(t, gap.Err(), leasegate.ErrLeaseGone)
	assert.Equal(t, leasegate.EndGone, gap.EndReason())
}

// TestGoSDKMultiLockAndSemaphoreLearnOfAForceRelease: a multi-lock watches each member's stream
// (by fence: the events endpoints take no group token) and a semaphore's permit its semaphore's.
func TestGoSDKMultiLockAndSemaphoreLearnOfAForceRelease(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	group, err := sdk.LockAll(ctx, []string{"acct.1", "acct.2"}, leasegate.MultiLockOptions{Owner: "transfer", TTL: 30 * time.Second})
	require.NoError(t, err)
	group.KeepAlive()
	harness.Eventually(t, 10*time.Second, "both members' streams to open", group.Watching)
	answered := forceRelease(t, e, "/locks/acct.2")
	took := waitDone(t, group.Done(), answered, 5*time.Second, "a member's force release")
	t.Logf("multi-lock: Done closed %v after a member's force release's answer", took)
	assert.Less(t, took, lostWithin)
	var lost *leasegate.LostError
	require.ErrorAs(t, group.Err(), &lost)
	assert.Equal(t, leasegate.EndForced, lost.Reason)
	assert.Equal(t, "acct.2", lost.Lock)
	assert.Equal(t, group.ID, lost.MultiLock)
	assert.Equal(t, group.Fence("acct.2"), lost.Fence)
	_, err = group.Release(ctx)
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone, "the group is gone; its release frees the other member")
	assert.False(t, e.Held("acct.1"))

	permit, err := sdk.AcquireSemaphore(ctx, "pool", leasegate.SemaphoreOptions{Owner: "w", Permits: 2, TTL: 30 * time.Second, WatchLoss: leasegate.WatchAlways})
	require.NoError(t, err)
	harness.Eventually(t, 10*time.Second, "the permit's stream to open", permit.Watching)
	answered = forceRelease(t, e, "/semaphores/pool")
	took = waitDone(t, permit.Done(), answered, 5*time.Second, "a semaphore's force release")
	t.Logf("semaphore: Done closed %v after the force release's answer", took)
	assert.Less(t, took, lostWithin)
	assert.ErrorIs(t, permit.Err(), leasegate.ErrLeaseForced)
	assert.True(t, errors.Is(permit.Err(), leasegate.ErrLeaseGone))
}
