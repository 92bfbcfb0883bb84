package lockcore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// newRedLockForTest starts n masters and a RedLock Service on them; it returns both.
func newRedLockForTest(t *testing.T, n int, guard time.Duration) (*Service, []*harness.Redis) {
	t.Helper()
	return newRedLockWith(t, n, Options{RestartGuard: guard})
}

// newRedLockWith is newRedLockForTest with opts (its key prefix is the test's own).
func newRedLockWith(t *testing.T, n int, opts Options) (*Service, []*harness.Redis) {
	t.Helper()
	var masters []*harness.Redis
	var clients []rueidis.ClientOption
	for range n {
		r := harness.NewRedis(t, harness.RedisOptions{})
		masters = append(masters, r)
		clients = append(clients, ClientOption(r.Addr, ""))
	}
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	opts.KeyPrefix, opts.RedLockNewDeployment = harness.RandomPrefix(), true
	s, err := NewRedLock(clients, tokens, opts)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, masters
}

// grantOn grants lock to lease on the given masters only, as if its acquire had reached those
// first: the start of a split.
func grantOn(t *testing.T, s *Service, masters []int, lock, lease, owner string) {
	t.Helper()
	req := AcquireRequest{Lock: lock, Owner: owner, TTL: 10 * time.Second}
	lc := s.lockCall(req.ref())
	c := lc.call(scripts.acquire, []string{lc.keys.ticket(""), lc.keys.idempotency("acquire", "", "")},
		lease, ms(req.TTL), owner, "0", "try", s.waiters.replica, "0", "0", "0", "x", "0")
	for _, i := range masters {
		r, err := runner{obs: s.obs}.run(context.Background(), s.dep.(*redlock).nodes[i].client, c.script, c.keys, c.args).AsIntSlice()
		require.NoError(t, err)
		require.Equal(t, int64(acquireGranted), r[0], "master %d grants %s", i, lease)
	}
}

// TestRedLockWaitersDoNotSplitTheMasters: two waiters that the masters granted in different
// orders, each holding a minority (2 + 2 of 5 masters, the fifth down), must not wait each other
// out. The later one gives its holds back where the earlier one is in line (redlock_yield.lua),
// so the earlier one gets a majority at once, and the later one after it. Without the yield
// neither would get the lock before its wait ran out.
func TestRedLockWaitersDoNotSplitTheMasters(t *testing.T) {
	s, masters := newRedLockForTest(t, 5, time.Minute)
	require.NoError(t, masters[4].Kill())
	grantOn(t, s, []int{0, 1}, "split", "w1", "first")
	grantOn(t, s, []int{2, 3}, "split", "w2", "second")

	type result struct {
		g   Grant
		err error
		at  time.Time
	}
	wait := func(lease, owner string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			req := AcquireRequest{Lock: "split", Owner: owner, TTL: 10 * time.Second, Wait: 20 * time.Second}
			g, err := s.waitAs(context.Background(), req, lease)
			ch <- result{g, err, time.Now()}
		}()
		return ch
	}
	start := time.Now()
	first := wait("w1", "first")
	harness.Eventually(t, 5*time.Second, "w1 queued on masters 3 and 4", func() bool {
		st, err := s.Inspect(context.Background(), LockRef("split"), "")
		return err == nil && st.Waiters >= 1
	})
	second := wait("w2", "second")

	r1 := <-first
	require.NoError(t, r1.err)
	assert.Equal(t, "first", r1.g.Owner)
	assert.Less(t, r1.at.Sub(start), 5*time.Second, "the earlier waiter got a majority long before its wait ran out")
	_, err := s.releaseLease(context.Background(), r1.g.Lease, idemKey{}, Exclusive)
	require.NoError(t, err)
	r2 := <-second
	require.NoError(t, r2.err)
	assert.Equal(t, "second", r2.g.Owner)
	assert.Greater(t, r2.g.Fence, r1.g.Fence)
	_, err = s.releaseLease(context.Background(), r2.g.Lease, idemKey{}, Exclusive)
	require.NoError(t, err)
}

// TestRedLockFenceWrittenBackWhenMastersDisagree: when the masters of a majority give different
// fences (here one master's last fence is far ahead, the third master is down), the grant's fence
// is the greatest, and it is written back so that a majority's last fence is at least it: the
// next grant, on another majority, is greater.
func TestRedLockFenceWrittenBackWhenMastersDisagree(t *testing.T) {
	s, masters := newRedLockForTest(t, 3, time.Millisecond) // a restarted master counts again at once
	k := s.keys(LockRef("fenced"))
	ahead := time.Now().Add(time.Hour).UnixMicro()
	masters[0].MustDo(t, "SET", k.fence, fmt.Sprint(ahead))
	require.NoError(t, masters[2].Kill())

	ctx := context.Background()
	g, err := s.Acquire(ctx, AcquireRequest{Lock: "fenced", Owner: "a", TTL: 5 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, ahead+1, g.Fence, "the greatest fence the majority gave")
	for _, i := range []int{0, 1} {
		assert.Equal(t, fmt.Sprint(ahead+1), masters[i].MustDo(t, "GET", k.fence), "master %d took the fence", i)
	}
	_, err = s.Release(ctx, ReleaseRequest{Ref: LockRef("fenced"), Token: g.Token})
	require.NoError(t, err)

	// The next majority is masters 1 and 2 (2 restarted empty): master 1 carries the fence on.
	require.NoError(t, masters[0].Kill())
	require.NoError(t, masters[2].Restart())
	harness.Eventually(t, 10*time.Second, "masters 1 and 2 grant", func() bool {
		g2, err := s.Acquire(ctx, AcquireRequest{Lock: "fenced", Owner: "b", TTL: 5 * time.Second})
		if err != nil {
			return false
		}
		assert.Greater(t, g2.Fence, g.Fence)
		return true
	})
}

// TestRedLockInspectShowsTheFenceAMajorityGranted: a master that was not among the majority that
// granted a waiter, and hands the lock to it later, holds it under a fence of its own, here far
// greater than the granted one (until redlock_settle.lua, when that master's reply is handled
// after the hand-off, sets the granted one). Inspecting the lock shows the fence the lease was
// granted with (and its token carries), which a majority holds, not that master's: the contention
// test under RedLock saw a holder's inspection answer a fence one above its token's.
func TestRedLockInspectShowsTheFenceAMajorityGranted(t *testing.T) {
	settles := &settleCounter{}
	s, masters := newRedLockWith(t, 3, Options{RestartGuard: time.Minute, Observer: settles})
	ctx := context.Background()
	k := s.keys(LockRef("late"))
	ahead := time.Now().Add(time.Hour).UnixMicro()
	masters[2].MustDo(t, "SET", k.fence, fmt.Sprint(ahead))
	grantOn(t, s, []int{2}, "late", "x", "earlier")

	// Masters 0 and 1 grant the waiter at once; master 2 queues it behind x.
	g, err := s.waitAs(ctx, AcquireRequest{Lock: "late", Owner: "w", TTL: 10 * time.Second, Wait: 5 * time.Second}, uuid.NewString())
	require.NoError(t, err)
	g.Token = s.tokens.Mint(g.Lease)
	harness.Eventually(t, 5*time.Second, "master 2's reply to w's acquire handled: w still in line there", func() bool {
		return settles.n.Load() == 1
	})
	// x's release on master 2 hands the lock to w there.
	lc := s.lockCall(LockRef("late"))
	rel := releaseArgs{lease: "x", which: "x"}.call(lc)
	require.NoError(t, runner{obs: s.obs}.run(ctx, s.dep.(*redlock).nodes[2].client, rel.script, rel.keys, rel.args).Error())
	require.Equal(t, "w", masters[2].MustDo(t, "HGET", k.lock, ":owner"), "master 2 handed the lock to w")
	require.NotEqual(t, fmt.Sprint(g.Fence), masters[2].MustDo(t, "HGET", k.lock, ":fence"), "under its own fence")
	// Master 2's reply to w's acquire, handled after that hand-off (the race the contention test
	// lost), settles it: w holds there for its TTL, under the granted fence.
	settle := lc.call(scripts.redlockSettle, nil, g.ID, "10000", fmt.Sprint(g.Fence))
	require.NoError(t, runner{obs: s.obs}.run(ctx, s.dep.(*redlock).nodes[2].client, settle.script, settle.keys, settle.args).Error())
	assert.Equal(t, fmt.Sprint(g.Fence), masters[2].MustDo(t, "HGET", k.lock, ":fence"), "settled under the granted fence")
	// Were it left under a greater fence of its own, for its whole TTL, the inspection would still
	// show the fence a majority holds.
	masters[2].MustDo(t, "HSET", k.lock, ":fence", fmt.Sprint(ahead+5))

	st, err := s.Inspect(ctx, LockRef("late"), g.Token)
	require.NoError(t, err)
	require.NotNil(t, st.Exclusive)
	assert.Equal(t, g.Fence, st.Exclusive.Fence, "the granted fence, which masters 0 and 1 hold")
	require.NotNil(t, st.Yours)
	assert.True(t, *st.Yours)
}

// settleCounter is an Observer that counts redlock_settle.lua's calls.
type settleCounter struct {
	nopObserver
	n atomic.Int64
}

func (c *settleCounter) ScriptCall(name string, _ bool, _ time.Duration) {
	if name == "redlock_settle" {
		c.n.Add(1)
	}
}
