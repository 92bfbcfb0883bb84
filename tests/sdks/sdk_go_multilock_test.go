package sdks

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// The Go SDK's multi-locks: Gateway.LockAll and MultiLease.

// memberOf reports whether lock is held, as a member of the multi-lock id.
func memberOf(t *testing.T, sdk *leasegate.Gateway, lock, id string) bool {
	t.Helper()
	st, err := sdk.Inspect(context.Background(), lock, "")
	require.NoError(t, err)
	return st.Held && st.Multilock != nil && *st.Multilock == id
}

// heldLock reports whether lock is held by anyone.
func heldLock(t *testing.T, sdk *leasegate.Gateway, lock string) bool {
	t.Helper()
	st, err := sdk.Inspect(context.Background(), lock, "")
	require.NoError(t, err)
	return st.Held
}

// TestGoSDKMultiLockGrantsEveryMember: LockAll takes both locks under one lease (members in name
// order, a fence each), each shows as held by the group; a single lock and an overlapping group
// are refused (the group's 409 lists the held member, and takes nothing); tokens stay in their
// name space; Release frees both.
func TestGoSDKMultiLockGrantsEveryMember(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)

	g, err := sdk.LockAll(ctx, []string{"beta", "alpha"}, leasegate.MultiLockOptions{Owner: "group", TTL: 30 * time.Second})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(g.ID, "m-"), g.ID)
	assert.Equal(t, "group", g.Owner)
	assert.Equal(t, leasegate.ModeExclusive, g.Mode)
	assert.False(t, g.Watchdog)
	require.Len(t, g.Members, 2)
	assert.Equal(t, "alpha", g.Members[0].Lock, "name order")
	assert.Equal(t, "beta", g.Members[1].Lock)
	for _, m := range g.Members {
		assert.Positive(t, m.Fence)
		assert.Equal(t, m.Fence, g.Fence(m.Lock))
	}
	assert.Zero(t, g.Fence("gamma"), "not a member")
	assert.Equal(t, int64(30000), g.Grant().TtlMs)
	assert.WithinDuration(t, time.Now().Add(30*time.Second), g.ValidUntil(), time.Second)
	assert.NoError(t, g.Err())

	for _, lock := range []string{"alpha", "beta"} {
		st, err := sdk.Inspect(ctx, lock, "")
		require.NoError(t, err)
		assert.True(t, st.Held, lock)
		require.NotNil(t, st.Multilock, lock)
		assert.Equal(t, g.ID, *st.Multilock, lock)
		require.NotNil(t, st.Owner, lock)
		assert.Equal(t, "group", *st.Owner, lock)
		require.NotNil(t, st.Fence, lock)
		assert.Equal(t, g.Fence(lock), *st.Fence, lock)
	}

	// A single lock and an overlapping group are refused; the group's 409 names the held member
	// and takes nothing.
	_, err = sdk.Lock(ctx, "beta", leasegate.LockOptions{Owner: "single"})
	require.ErrorIs(t, err, leasegate.ErrHeld)
	_, err = sdk.LockAll(ctx, []string{"gamma", "beta"}, leasegate.MultiLockOptions{Owner: "other"})
	require.ErrorIs(t, err, leasegate.ErrHeld)
	var p *leasegate.ProblemError
	require.ErrorAs(t, err, &p)
	assert.Equal(t, []string{"beta"}, p.Members())
	assert.Greater(t, p.RetryAfter(), 20*time.Second)
	assert.False(t, heldLock(t, sdk, "gamma"), "all or nothing")

	// The group's token is refused by a lock's endpoints and a lock's by the group's (400).
	single, err := sdk.Lock(ctx, "gamma", leasegate.LockOptions{Owner: "single", TTL: 30 * time.Second})
	require.NoError(t, err)
	_, err = sdk.Inspect(ctx, "alpha", g.Token)
	require.ErrorAs(t, err, &p)
	assert.Equal(t, http.StatusBadRequest, int(p.Status))
	assert.Equal(t, "urn:leasegate:problem:invalid-lease-token", p.Type)
	rel, err := sdk.API.ReleaseLockWithResponse(ctx, "alpha", &leasegate.ReleaseLockParams{LeaseToken: &g.Token})
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, rel.StatusCode(), string(rel.Body))
	mrel, err := sdk.API.ReleaseMultiLockByIdWithResponse(ctx, g.ID, &leasegate.ReleaseMultiLockByIdParams{LeaseToken: single.Token})
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, mrel.StatusCode(), string(mrel.Body))
	assert.True(t, memberOf(t, sdk, "alpha", g.ID), "still held after the refusals")
	_, err = single.Release(ctx)
	require.NoError(t, err)

	// Renew, then Release: both freed, the lease ended; a second release finds it gone.
	require.NoError(t, g.Renew(ctx, time.Minute))
	assert.Equal(t, int64(60000), g.Grant().TtlMs)
	released, err := g.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	assert.ErrorIs(t, g.Err(), leasegate.ErrReleased)
	assert.False(t, heldLock(t, sdk, "alpha"))
	assert.False(t, heldLock(t, sdk, "beta"))
	_, err = g.Release(ctx)
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone)
}

// TestGoSDKMultiLockWaitsForAnOverlappingGroup: a group waiting (in 300 ms long-polls) for a
// member another group holds gets both once that group is released; a wait that runs out returns
// the lock-held problem with the held member.
func TestGoSDKMultiLockWaitsForAnOverlappingGroup(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_ACCESS_LOG": "all"}) // counts the 409 polls in the access log
	ctx := context.Background()
	sdk := sdkClient(t, e)

	first, err := sdk.LockAll(ctx, []string{"a", "b"}, leasegate.MultiLockOptions{Owner: "first", TTL: 30 * time.Second})
	require.NoError(t, err)

	// A wait that runs out.
	start := time.Now()
	_, err = sdk.LockAll(ctx, []string{"b", "c"}, leasegate.MultiLockOptions{Owner: "impatient", TTL: 30 * time.Second,
		Wait: 500 * time.Millisecond, MaxWaitPerRequest: 200 * time.Millisecond})
	require.ErrorIs(t, err, leasegate.ErrHeld)
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "waited the whole wait")
	var p *leasegate.ProblemError
	require.ErrorAs(t, err, &p)
	assert.Equal(t, []string{"b"}, p.Members())
	assert.NotNil(t, p.WaitedMs)
	assert.False(t, heldLock(t, sdk, "c"), "gave back what it took")

	type result struct {
		group *leasegate.MultiLease
		err   error
	}
	second := make(chan result, 1)
	go func() {
		g, err := sdk.LockAll(ctx, []string{"c", "b"}, leasegate.MultiLockOptions{Owner: "second", TTL: 30 * time.Second,
			Wait: 30 * time.Second, MaxWaitPerRequest: 300 * time.Millisecond})
		second <- result{g, err}
	}()
	polls := func() int { return strings.Count(e.Gateway.Logs(), `"path":"/multilocks","status":409`) }
	since := polls()
	harness.Eventually(t, 10*time.Second, "two of the waiter's long-polls to run out", func() bool { return polls() >= since+2 })
	harness.Eventually(t, 5*time.Second, "the waiter in b's line", func() bool { return e.Waiters(t, "b") == 1 })
	assert.True(t, memberOf(t, sdk, "a", first.ID))

	released, err := first.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	r := <-second
	require.NoError(t, r.err)
	g := r.group
	assert.Equal(t, "second", g.Owner)
	assert.Greater(t, g.Fence("b"), first.Fence("b"))
	assert.NoError(t, g.Err(), "not lapsing right after a grant that followed a wait")
	assert.True(t, memberOf(t, sdk, "b", g.ID))
	assert.True(t, memberOf(t, sdk, "c", g.ID))
	assert.False(t, heldLock(t, sdk, "a"))
	_, err = g.Release(ctx)
	require.NoError(t, err)
}

// TestGoSDKMultiLockKeepsItsPlaceAcrossLongPolls: LockAll split into 300 ms long-polls presents
// the queue ticket of each 409 with the next: the group stays ahead of a single waiter that queued
// after it, under the same id and arrival, and gets the members when the holder releases.
func TestGoSDKMultiLockKeepsItsPlaceAcrossLongPolls(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_ACCESS_LOG": "all"}) // counts the 409 polls in the access log
	ctx := context.Background()
	sdk := sdkClient(t, e)
	holder, err := sdk.Lock(ctx, "place.b", leasegate.LockOptions{Owner: "holder", TTL: time.Minute})
	require.NoError(t, err)

	type result struct {
		group *leasegate.MultiLease
		err   error
	}
	waiting := make(chan result, 1)
	go func() {
		g, err := sdk.LockAll(ctx, []string{"place.b", "place.a"}, leasegate.MultiLockOptions{Owner: "group", TTL: time.Minute,
			Wait: 30 * time.Second, MaxWaitPerRequest: 300 * time.Millisecond})
		waiting <- result{g, err}
	}()
	var in testkit.ListedWaiter
	harness.Eventually(t, 5*time.Second, "the group in place.b's line", func() bool {
		ws := testkit.Waiting(e.Client, "place.b")
		if len(ws) == 1 && ws[0].Multilock != "" {
			in = ws[0]
			return true
		}
		return false
	})
	type single struct {
		lease *leasegate.Lease
		err   error
	}
	later := make(chan single, 1)
	go func() {
		l, err := sdk.Lock(ctx, "place.b", leasegate.LockOptions{Owner: "later", TTL: time.Minute, Wait: 30 * time.Second})
		later <- single{l, err}
	}()
	harness.Eventually(t, 5*time.Second, "the later waiter in line", func() bool {
		return slices.ContainsFunc(testkit.Waiting(e.Client, "place.b"), func(w testkit.ListedWaiter) bool { return w.Owner == "later" })
	})
	polls := func() int { return strings.Count(e.Gateway.Logs(), `"path":"/multilocks","status":409`) }
	since := polls()
	harness.Eventually(t, 10*time.Second, "two more long-polls to run out", func() bool { return polls() >= since+2 })
	// Release right after a long-poll ran out and the next is back in line: well within its 300 ms.
	since = polls()
	harness.Eventually(t, 5*time.Second, "a long-poll to run out", func() bool { return polls() > since })
	harness.Eventually(t, 5*time.Second, "the group back first in line, as it came", func() bool {
		ws := testkit.Waiting(e.Client, "place.b")
		return len(ws) == 2 && ws[0] == in && ws[1].Owner == "later"
	})
	_, err = holder.Release(ctx)
	require.NoError(t, err)
	r := testkit.Receive(t, waiting, 5*time.Second, "the group's grant")
	require.NoError(t, r.err)
	assert.Equal(t, in.Multilock, r.group.ID, "the same group from its first long-poll to its grant")
	assert.True(t, memberOf(t, sdk, "place.a", r.group.ID))
	assert.True(t, memberOf(t, sdk, "place.b", r.group.ID))
	select {
	case l := <-later:
		t.Fatalf("the later waiter was answered before the group: %v", l.err)
	default:
	}
	_, err = r.group.Release(ctx)
	require.NoError(t, err)
	l := testkit.Receive(t, later, 5*time.Second, "place.b for the later waiter")
	require.NoError(t, l.err)
	_, err = l.lease.Release(ctx)
	require.NoError(t, err)
}

// TestGoSDKMultiLockKeepAlive: a group with a 900 ms TTL, kept alive, holds both members well past
// it, while work reads the lease concurrently (the race detector watches); a group nobody renews
// closes Done a margin before it can lapse, while Redis still has it.
func TestGoSDKMultiLockKeepAlive(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)

	g, err := sdk.LockAll(ctx, []string{"k1", "k2"}, leasegate.MultiLockOptions{Owner: "k", TTL: 900 * time.Millisecond})
	require.NoError(t, err)
	g.KeepAlive()
	g.KeepAlive() // a second call does nothing
	readers := make(chan struct{})
	go func() { // work reading the lease while it is renewed
		defer close(readers)
		for g.Err() == nil {
			_ = g.Grant().TtlMs + g.Fence("k1")
			_ = g.ValidUntil()
			<-time.After(time.Millisecond)
		}
	}()
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; <-time.After(100 * time.Millisecond) {
		require.True(t, memberOf(t, sdk, "k1", g.ID), "kept alive")
		require.True(t, memberOf(t, sdk, "k2", g.ID), "kept alive")
		require.NoError(t, g.Err())
	}
	assert.True(t, time.Now().Before(g.ValidUntil()))
	released, err := g.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	<-readers
	assert.ErrorIs(t, g.Err(), leasegate.ErrReleased)
	assert.False(t, heldLock(t, sdk, "k1"))

	idle, err := sdk.LockAll(ctx, []string{"i1", "i2"}, leasegate.MultiLockOptions{Owner: "i", TTL: 2 * time.Second})
	require.NoError(t, err)
	<-idle.Done()
	assert.ErrorIs(t, idle.Err(), leasegate.ErrLeaseLapsing)
	assert.True(t, time.Now().Before(idle.ValidUntil()), "Done closed before the lease can lapse")
	assert.True(t, memberOf(t, sdk, "i1", idle.ID), "still held when Done closed")
	assert.True(t, memberOf(t, sdk, "i2", idle.ID), "still held when Done closed")
	_, err = idle.Release(ctx)
	require.NoError(t, err)
}

// TestGoSDKMultiLockLostMember: a member whose key vanishes (as if it had expired) makes the next
// renewal answer lease-gone naming it, frees the other member and ends the lease, whether the
// renewal is Renew's or KeepAlive's; a group left to expire (Done closed first, before it could
// lapse) answers lease-gone naming both.
func TestGoSDKMultiLockLostMember(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "deletes a member's key on the Redis")
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)

	g, err := sdk.LockAll(ctx, []string{"x1", "x2"}, leasegate.MultiLockOptions{Owner: "x", TTL: 30 * time.Second})
	require.NoError(t, err)
	e.Redis.MustDo(t, "DEL", e.Gateway.KeyPrefix+"{x1}")
	err = g.Renew(ctx, 0)
	require.ErrorIs(t, err, leasegate.ErrLeaseGone)
	var p *leasegate.ProblemError
	require.ErrorAs(t, err, &p)
	assert.Equal(t, []string{"x1"}, p.Members())
	select {
	case <-g.Done():
	default:
		t.Fatal("Done still open after a renewal answered 410")
	}
	assert.ErrorIs(t, g.Err(), leasegate.ErrLeaseGone)
	assert.ErrorIs(t, context.Cause(g.Context()), leasegate.ErrLeaseGone)
	assert.False(t, heldLock(t, sdk, "x2"), "the gateway freed the other member")
	_, err = g.Release(ctx)
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone)

	// KeepAlive's renewal finds it out.
	kept, err := sdk.LockAll(ctx, []string{"y1", "y2"}, leasegate.MultiLockOptions{Owner: "y", TTL: 900 * time.Millisecond})
	require.NoError(t, err)
	kept.KeepAlive()
	e.Redis.MustDo(t, "DEL", e.Gateway.KeyPrefix+"{y2}")
	select {
	case <-kept.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close after a member was lost")
	}
	assert.ErrorIs(t, kept.Err(), leasegate.ErrLeaseGone)
	require.ErrorAs(t, kept.Err(), &p)
	assert.Equal(t, []string{"y2"}, p.Members())
	assert.False(t, heldLock(t, sdk, "y1"), "the gateway freed the other member")

	// Left to expire: both members lost.
	idle, err := sdk.LockAll(ctx, []string{"z1", "z2"}, leasegate.MultiLockOptions{Owner: "z", TTL: 500 * time.Millisecond})
	require.NoError(t, err)
	harness.Eventually(t, 5*time.Second, "both members to expire", func() bool {
		return !heldLock(t, sdk, "z1") && !heldLock(t, sdk, "z2")
	})
	err = idle.Renew(ctx, 0)
	require.ErrorIs(t, err, leasegate.ErrLeaseGone)
	require.ErrorAs(t, err, &p)
	assert.Equal(t, []string{"z1", "z2"}, p.Members())
	assert.ErrorIs(t, idle.Err(), leasegate.ErrLeaseLapsing, "it ended a margin before it could lapse; that stays its cause")
}

// TestGoSDKMultiLockSharedAndViaAnotherReplica: shared groups coexist and keep an exclusive lock
// out; a group is renewed and released through another replica (RenewVia, ReleaseVia).
func TestGoSDKMultiLockSharedAndViaAnotherReplica(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk := sdkClient(t, e)
	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	other, err := leasegate.New(gw2.URL)
	require.NoError(t, err)

	shared := leasegate.MultiLockOptions{Mode: leasegate.ModeShared, TTL: 30 * time.Second}
	shared.Owner = "reader-1"
	r1, err := sdk.LockAll(ctx, []string{"s1", "s2"}, shared)
	require.NoError(t, err)
	shared.Owner = "reader-2"
	r2, err := other.LockAll(ctx, []string{"s2", "s3"}, shared)
	require.NoError(t, err)
	assert.Equal(t, leasegate.ModeShared, r1.Mode)
	st, err := sdk.Inspect(ctx, "s2", "")
	require.NoError(t, err)
	require.NotNil(t, st.HolderCount)
	assert.Equal(t, int64(2), *st.HolderCount)
	_, err = sdk.Lock(ctx, "s2", leasegate.LockOptions{Owner: "writer"})
	require.ErrorIs(t, err, leasegate.ErrHeld)

	require.NoError(t, r1.RenewVia(ctx, other, 20*time.Second))
	assert.Equal(t, int64(20000), r1.Grant().TtlMs)
	released, err := r1.ReleaseVia(ctx, other)
	require.NoError(t, err)
	assert.True(t, released)
	assert.False(t, heldLock(t, sdk, "s1"))
	released, err = r2.ReleaseVia(ctx, sdk)
	require.NoError(t, err)
	assert.True(t, released)
	assert.False(t, heldLock(t, sdk, "s2"))
	assert.False(t, heldLock(t, sdk, "s3"))
}
