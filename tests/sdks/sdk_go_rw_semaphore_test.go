package sdks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	leasegate "github.com/leasegate/leasegate/sdk/go"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// sdkClient is an SDK client of e's gateway.
func sdkClient(t *testing.T, e *testkit.Env) *leasegate.Gateway {
	t.Helper()
	gw, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)
	return gw
}

// TestGoSDKSharedHoldersBlockExclusive: shared leases coexist, keep an exclusive try out, and an
// exclusive waiter gets the lock once the last of them has gone; a shared holder cannot upgrade.
func TestGoSDKSharedHoldersBlockExclusive(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)
	shared := leasegate.LockOptions{Mode: leasegate.ModeShared, TTL: 30 * time.Second}

	shared.Owner = "reader-a"
	a, err := sdk.Lock(ctx, "rw", shared)
	require.NoError(t, err)
	shared.Owner = "reader-b"
	b, err := sdk.Lock(ctx, "rw", shared)
	require.NoError(t, err)
	for _, l := range []*leasegate.Lease{a, b} {
		assert.Equal(t, leasegate.ModeShared, l.Mode())
		assert.Equal(t, leasegate.ModeShared, l.Grant().Mode)
		assert.Equal(t, int64(1), l.Holds())
	}
	assert.Greater(t, b.Fence, a.Fence)
	st, err := sdk.Inspect(ctx, "rw", "")
	require.NoError(t, err)
	assert.True(t, st.Held)
	require.NotNil(t, st.Mode)
	assert.Equal(t, leasegate.ModeShared, *st.Mode)
	require.NotNil(t, st.HolderCount)
	assert.Equal(t, int64(2), *st.HolderCount)

	// An exclusive try is refused while they hold.
	_, err = sdk.Lock(ctx, "rw", leasegate.LockOptions{Owner: "writer"})
	require.ErrorIs(t, err, leasegate.ErrHeld)
	var p *leasegate.ProblemError
	require.ErrorAs(t, err, &p)
	assert.Positive(t, p.RetryAfter())

	// A shared holder asking for exclusive is refused, and keeps its shared hold.
	err = a.ReenterMode(ctx, leasegate.ModeExclusive, 0)
	require.ErrorIs(t, err, leasegate.ErrUpgradeRefused)
	require.ErrorAs(t, err, &p)
	assert.Equal(t, http.StatusConflict, int(p.Status))
	assert.NoError(t, a.Err())
	assert.Equal(t, leasegate.ModeShared, a.Mode())
	assert.Equal(t, int64(1), a.Holds())

	// A shared holder re-enters shared.
	require.NoError(t, b.Reenter(ctx, 0))
	assert.Equal(t, int64(2), b.Holds())
	assert.Equal(t, leasegate.ModeShared, b.Mode())

	// An exclusive waiter queues; behind it, a shared try is refused too (no barging readers).
	type result struct {
		lease *leasegate.Lease
		err   error
	}
	writer := make(chan result, 1)
	go func() {
		l, err := sdk.Lock(ctx, "rw", leasegate.LockOptions{Owner: "writer", TTL: 30 * time.Second, Wait: 30 * time.Second})
		writer <- result{l, err}
	}()
	harness.Eventually(t, 5*time.Second, "the writer in line", func() bool {
		st, err := sdk.Inspect(ctx, "rw", "")
		return err == nil && st.Waiters == 1
	})
	_, err = sdk.Lock(ctx, "rw", leasegate.LockOptions{Owner: "reader-c", Mode: leasegate.ModeShared})
	require.ErrorIs(t, err, leasegate.ErrHeld)

	released, err := a.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	assert.ErrorIs(t, a.Err(), leasegate.ErrReleased)
	for range 2 {
		released, err = b.Release(ctx)
		require.NoError(t, err)
	}
	assert.True(t, released)
	w := <-writer
	require.NoError(t, w.err)
	assert.Equal(t, leasegate.ModeExclusive, w.lease.Mode())
	assert.Greater(t, w.lease.Fence, b.Fence)
	released, err = w.lease.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
}

// TestGoSDKDowngradeAndReleaseMode: an exclusive lease takes a shared hold too; Release gives back
// its exclusive hold first (a downgrade), ReleaseMode picks the hold.
func TestGoSDKDowngradeAndReleaseMode(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)
	mode := func(lock string) leasegate.Mode {
		st, err := sdk.Inspect(ctx, lock, "")
		require.NoError(t, err)
		if st.Mode == nil {
			return ""
		}
		return *st.Mode
	}

	// Downgrade: exclusive + shared, Release gives back the exclusive hold.
	x, err := sdk.Lock(ctx, "down", leasegate.LockOptions{Owner: "x", TTL: 30 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, leasegate.ModeExclusive, x.Mode())
	require.NoError(t, x.ReenterMode(ctx, leasegate.ModeShared, 30*time.Second))
	assert.Equal(t, int64(2), x.Holds())
	assert.Equal(t, leasegate.ModeExclusive, x.Mode(), "still exclusive while it holds both ways")
	released, err := x.Release(ctx)
	require.NoError(t, err)
	assert.False(t, released, "the shared hold remains")
	assert.NoError(t, x.Err())
	assert.Equal(t, leasegate.ModeShared, x.Mode())
	assert.Equal(t, int64(1), x.Holds())
	assert.Equal(t, leasegate.ModeShared, mode("down"))
	// Now a reader may join it.
	r, err := sdk.Lock(ctx, "down", leasegate.LockOptions{Owner: "r", Mode: leasegate.ModeShared})
	require.NoError(t, err)
	// It has no exclusive hold left to give back: 410 for that hold, but the lease lives on.
	_, err = x.ReleaseMode(ctx, leasegate.ModeExclusive)
	require.ErrorIs(t, err, leasegate.ErrLeaseGone)
	assert.NoError(t, x.Err())
	require.NoError(t, x.Renew(ctx, 0))
	released, err = x.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	assert.ErrorIs(t, x.Err(), leasegate.ErrReleased)
	_, err = r.Release(ctx)
	require.NoError(t, err)

	// ReleaseMode(shared) on a lease holding both ways keeps it exclusive.
	y, err := sdk.Lock(ctx, "pick", leasegate.LockOptions{Owner: "y", TTL: 30 * time.Second})
	require.NoError(t, err)
	require.NoError(t, y.ReenterMode(ctx, leasegate.ModeShared, 30*time.Second))
	released, err = y.ReleaseMode(ctx, leasegate.ModeShared)
	require.NoError(t, err)
	assert.False(t, released)
	assert.Equal(t, leasegate.ModeExclusive, y.Mode())
	assert.Equal(t, int64(1), y.Holds())
	st, err := sdk.Inspect(ctx, "pick", y.Token)
	require.NoError(t, err)
	assert.Equal(t, leasegate.ModeExclusive, *st.Mode)
	assert.Nil(t, st.HolderCount, "no shared holder left")
	assert.True(t, *st.Yours)
	released, err = y.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	assert.Equal(t, leasegate.Mode(""), mode("pick"))
}

// TestGoSDKSemaphoreBoundsHolders has 10 goroutines wait for a semaphore of 3 permits. Each holds
// its permit until the semaphore has been seen full since its grant (or nobody is left to fill
// it): at most 3 hold at once, 3 do at some point, and all get a permit.
func TestGoSDKSemaphoreBoundsHolders(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)
	const permits, workers = 3, 10
	var inUse, most, fills, granted atomic.Int64

	hold := func(l *leasegate.Lease) error {
		filled := fills.Load()
		n := inUse.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n == permits {
			fills.Add(1)
		}
		granted.Add(1)
		for deadline := time.Now().Add(20 * time.Second); fills.Load() == filled && granted.Load() < workers; {
			if time.Now().After(deadline) {
				inUse.Add(-1)
				return errors.New("the semaphore never filled up")
			}
			<-time.After(time.Millisecond)
		}
		inUse.Add(-1)
		released, err := l.Release(ctx)
		if err == nil && !released {
			err = errors.New("permit not released")
		}
		return err
	}
	errs := make(chan error, workers)
	for i := range workers {
		go func() {
			l, err := sdk.AcquireSemaphore(ctx, "pool", leasegate.SemaphoreOptions{Owner: fmt.Sprintf("worker-%d", i),
				Permits: permits, TTL: 30 * time.Second, Wait: 30 * time.Second, MaxWaitPerRequest: 500 * time.Millisecond})
			switch {
			case err != nil:
				errs <- err
			case l.Permits != permits || l.Used() < 1 || l.Used() > permits:
				_, _ = l.Release(ctx)
				errs <- fmt.Errorf("grant says %d of %d permits in use", l.Used(), l.Permits)
			default:
				errs <- hold(l)
			}
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, int64(workers), granted.Load(), "every worker got a permit")
	assert.Equal(t, int64(permits), most.Load(), "never more than %d holders, and %d at once", permits, permits)
	st, err := sdk.InspectSemaphore(ctx, "pool", "")
	require.NoError(t, err)
	assert.Zero(t, st.Used)
	assert.Zero(t, st.Waiters)
}

// TestGoSDKSemaphoreErrors: a full semaphore and a wrong size are typed errors; a split wait
// keeps its place and gets the freed permit; a permit re-enters and releases like a lease.
func TestGoSDKSemaphoreErrors(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_ACCESS_LOG": "all"}) // counts the 409 polls in the access log
	ctx := context.Background()
	sdk := sdkClient(t, e)

	holder, err := sdk.AcquireSemaphore(ctx, "api", leasegate.SemaphoreOptions{Owner: "h", Permits: 1, TTL: 30 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, int64(1), holder.Permits)
	assert.Equal(t, "api", holder.Lock)
	assert.Equal(t, leasegate.ModeShared, holder.Mode())

	// Full: try once, then a split wait that runs out.
	_, err = sdk.AcquireSemaphore(ctx, "api", leasegate.SemaphoreOptions{Owner: "o", Permits: 1})
	require.ErrorIs(t, err, leasegate.ErrSemaphoreFull)
	assert.NotErrorIs(t, err, leasegate.ErrHeld)
	var p *leasegate.ProblemError
	require.ErrorAs(t, err, &p)
	assert.Greater(t, p.RetryAfter(), 20*time.Second)
	_, err = sdk.AcquireSemaphore(ctx, "api", leasegate.SemaphoreOptions{Owner: "o", Permits: 1,
		Wait: 300 * time.Millisecond, MaxWaitPerRequest: 100 * time.Millisecond})
	require.ErrorIs(t, err, leasegate.ErrSemaphoreFull)
	require.ErrorAs(t, err, &p)
	assert.NotNil(t, p.WaitedMs)

	// Another size: refused at once, however long it would wait, with the semaphore's size.
	start := time.Now()
	_, err = sdk.AcquireSemaphore(ctx, "api", leasegate.SemaphoreOptions{Owner: "o", Permits: 5, Wait: 30 * time.Second})
	require.ErrorIs(t, err, leasegate.ErrPermitsMismatch)
	require.ErrorAs(t, err, &p)
	assert.Equal(t, int64(1), p.SemaphorePermits())
	assert.Less(t, time.Since(start), 15*time.Second, "a mismatch does not wait")

	// A waiter splitting its wait into 200 ms long-polls gets the permit once it is freed.
	type result struct {
		lease *leasegate.Lease
		err   error
	}
	waiter := make(chan result, 1)
	go func() {
		l, err := sdk.AcquireSemaphore(ctx, "api", leasegate.SemaphoreOptions{Owner: "w", Permits: 1, TTL: 30 * time.Second,
			Wait: 30 * time.Second, MaxWaitPerRequest: 200 * time.Millisecond})
		waiter <- result{l, err}
	}()
	polls := func() int { return strings.Count(e.Gateway.Logs(), `"path":"/semaphores/api","status":409`) }
	since := polls()
	harness.Eventually(t, 10*time.Second, "two long-polls to run out", func() bool { return polls() >= since+2 })
	harness.Eventually(t, 5*time.Second, "the waiter back in line", func() bool {
		st, err := sdk.InspectSemaphore(ctx, "api", "")
		return err == nil && st.Waiters == 1
	})
	released, err := holder.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	w := <-waiter
	require.NoError(t, w.err)
	permit := w.lease
	assert.Greater(t, permit.Fence, holder.Fence)

	// Re-entry, renewal and release, as for a lock's lease.
	require.NoError(t, permit.Reenter(ctx, 30*time.Second))
	assert.Equal(t, int64(2), permit.Holds())
	require.NoError(t, permit.Renew(ctx, time.Minute))
	assert.Equal(t, int64(60000), permit.Grant().TtlMs)
	_, err = permit.ReleaseMode(ctx, leasegate.ModeExclusive)
	require.Error(t, err, "a permit has no exclusive hold")
	assert.NotErrorIs(t, err, leasegate.ErrLeaseGone)
	assert.NoError(t, permit.Err())
	released, err = permit.Release(ctx)
	require.NoError(t, err)
	assert.False(t, released)
	released, err = permit.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	assert.ErrorIs(t, permit.Err(), leasegate.ErrReleased)
	_, err = permit.Release(ctx)
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone)
}

// TestGoSDKSemaphoreKeepAlive: a permit with a 900 ms TTL, kept alive, is still held well past it.
func TestGoSDKSemaphoreKeepAlive(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)
	permit, err := sdk.AcquireSemaphore(ctx, "kept", leasegate.SemaphoreOptions{Owner: "k", Permits: 2, TTL: 900 * time.Millisecond})
	require.NoError(t, err)
	permit.KeepAlive()
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; <-time.After(100 * time.Millisecond) {
		st, err := sdk.InspectSemaphore(ctx, "kept", permit.Token)
		require.NoError(t, err)
		require.True(t, *st.Yours, "kept alive")
		require.Equal(t, int64(1), st.Used)
		require.NoError(t, permit.Err())
	}
	assert.True(t, time.Now().Before(permit.ValidUntil()))
	released, err := permit.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	assert.ErrorIs(t, permit.Err(), leasegate.ErrReleased)
	st, err := sdk.InspectSemaphore(ctx, "kept", "")
	require.NoError(t, err)
	assert.Zero(t, st.Used)
}

// TestGoSDKTokensStayInTheirNameSpace: a lock and a semaphore of the same name are apart, and
// neither's token is accepted by the other's endpoints (400), which leaves both held.
func TestGoSDKTokensStayInTheirNameSpace(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)
	lock, err := sdk.Lock(ctx, "same", leasegate.LockOptions{Owner: "l", TTL: 30 * time.Second})
	require.NoError(t, err)
	permit, err := sdk.AcquireSemaphore(ctx, "same", leasegate.SemaphoreOptions{Owner: "s", Permits: 1, TTL: 30 * time.Second})
	require.NoError(t, err)

	invalidToken := func(err error) {
		t.Helper()
		var p *leasegate.ProblemError
		require.ErrorAs(t, err, &p)
		assert.Equal(t, http.StatusBadRequest, int(p.Status))
		assert.Equal(t, "urn:leasegate:problem:invalid-lease-token", p.Type)
	}
	_, err = sdk.InspectSemaphore(ctx, "same", lock.Token)
	invalidToken(err)
	_, err = sdk.Inspect(ctx, "same", permit.Token)
	invalidToken(err)
	rel, err := sdk.API.ReleaseSemaphoreWithResponse(ctx, "same", &leasegate.ReleaseSemaphoreParams{LeaseToken: &lock.Token})
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, rel.StatusCode())
	ren, err := sdk.API.RenewLockWithResponse(ctx, "same", &leasegate.RenewLockParams{LeaseToken: permit.Token}, leasegate.RenewRequest{})
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, ren.StatusCode())

	st, err := sdk.Inspect(ctx, "same", lock.Token)
	require.NoError(t, err)
	assert.True(t, *st.Yours)
	sst, err := sdk.InspectSemaphore(ctx, "same", permit.Token)
	require.NoError(t, err)
	assert.True(t, *sst.Yours)
	for _, l := range []*leasegate.Lease{lock, permit} {
		released, err := l.Release(ctx)
		require.NoError(t, err)
		assert.True(t, released)
	}
}
