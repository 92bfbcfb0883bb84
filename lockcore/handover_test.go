package lockcore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// TestAReleaseHandsItsOwnWaitersTheirTTL checks the two ways a release hands a lock on: to a
// waiter of the releasing gateway with the waiter's TTL at once (the gateway running the release
// is there to hand it over, so no confirmation round trip), and to a waiter of another gateway as
// a claim of ClaimTTL, which only that gateway's confirmation turns into its TTL (a frozen or dead
// gateway's waiter holds the lock for the claim alone). The grant the local waiter gets counts its
// TTL from before the release was sent: it never promises more than Redis keeps.
// (TestWaitEndingAsItIsGrantedStrandsNothing and its neighbours race waits ending against the
// same hand-over: a hold handed to a waiter that left is passed on.)
func TestAReleaseHandsItsOwnWaitersTheirTTL(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	other := w.replica(t, lockcore.Options{})
	ctx := context.Background()
	const lock, ttl = "hand-over", time.Minute
	pttl := func() time.Duration {
		ms, err := strconv.ParseInt(w.redis.MustDo(t, "PTTL", w.key(lock, "")), 10, 64)
		require.NoError(t, err)
		return time.Duration(ms) * time.Millisecond
	}

	holder := w.hold(t, w.svc, lock, "holder", ttl)
	local := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "local", TTL: ttl, Wait: 30 * time.Second})
	w.awaitWaiters(t, lock, 1)
	remote := acquireAsync(ctx, other, lockcore.AcquireRequest{Lock: lock, Owner: "remote", TTL: ttl, Wait: 30 * time.Second})
	w.awaitWaiters(t, lock, 2)

	sent := time.Now()
	_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
	returned := time.Now()
	require.NoError(t, err)
	assert.Greater(t, pttl(), 30*time.Second, "the releasing gateway's waiter holds the lock with its TTL as the release returns")
	got := receive(t, local, 10*time.Second, "the local waiter's grant")
	require.NoError(t, got.err)
	assert.Equal(t, "local", got.grant.Owner)
	assert.Greater(t, got.grant.Fence, holder.Fence)
	from := got.grant.ExpiresAt.Add(-ttl)
	assert.True(t, !from.Before(sent) && !from.After(returned),
		"the grant counts its TTL from the release's call (%v after the release was sent, which returned after %v)",
		from.Sub(sent), returned.Sub(sent))
	st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), got.grant.Token)
	require.NoError(t, err)
	require.NotNil(t, st.Yours)
	assert.True(t, *st.Yours, "Redis has the local waiter as holder: %+v", st)

	_, err = w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: got.grant.Token})
	require.NoError(t, err)
	if left := pttl(); left > 0 { // the remote waiter may have confirmed already
		assert.True(t, left <= 750*time.Millisecond || left > 30*time.Second,
			"another gateway's waiter holds a claim until its gateway confirms it: PTTL %v", left)
	}
	far := receive(t, remote, 10*time.Second, "the remote waiter's grant")
	require.NoError(t, far.err)
	assert.Equal(t, "remote", far.grant.Owner)
	assert.Greater(t, far.grant.Fence, got.grant.Fence)
	assert.Greater(t, pttl(), 30*time.Second, "confirmed, the remote waiter holds the lock with its TTL")
}
