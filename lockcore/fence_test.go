package lockcore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// floor is the fence floor of every lock on w's Redis (see deployment.fences).
func (w *waitWorld) floor() string { return w.prefix + "fence" }

// TestAHeldLockIsOneKeyAndAFreeNameNone: a held lock is its hash alone (its fence is in it, and the
// Redis's fence floor, shared by every lock, has it as the last fence granted); a released name
// leaves nothing of its own. Once the floor expired (FenceTTL after the Redis's last grant),
// fences still rise: their floor is then the Redis clock.
func TestAHeldLockIsOneKeyAndAFreeNameNone(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{FenceTTL: 300 * time.Millisecond})
	ctx := context.Background()
	const lock = "once"
	var last int64
	for round := range 3 {
		g := w.hold(t, w.svc, lock, "owner", time.Minute)
		assert.Greater(t, g.Fence, last, "round %d", round)
		last = g.Fence
		assert.Equal(t, w.key(lock, ""), w.redis.MustDo(t, "KEYS", w.prefix+"{"+lock+"}*"), "round %d: one key per held lock", round)
		assert.Equal(t, strconv.FormatInt(g.Fence, 10), w.redis.MustDo(t, "HGET", w.key(lock, ""), ":fence"))
		assert.Equal(t, strconv.FormatInt(g.Fence, 10), w.redis.MustDo(t, "GET", w.floor()), "the floor holds the last fence")

		_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: g.Token})
		require.NoError(t, err)
		assert.Empty(t, w.redis.MustDo(t, "KEYS", w.prefix+"{"+lock+"}*"), "round %d: nothing left in Redis for the name", round)
		pollUntil(t, 5*time.Second, "the fence floor to expire", func() bool {
			return w.redis.MustDo(t, "EXISTS", w.floor()) == "0"
		})
	}
}

// TestFencesRiseWhenTheRedisClockIsBehind: the fence floor keeps every lock's fences rising where
// the Redis clock alone would not (a clock that stepped back, here by an hour: the floor is set an
// hour ahead): across a release, an expiry (which runs no script), grants of other names, shared
// holds and semaphore permits, and a restart of a Redis with AOF.
func TestFencesRiseWhenTheRedisClockIsBehind(t *testing.T) {
	t.Parallel()
	w := &waitWorld{redis: harness.NewRedis(t, harness.RedisOptions{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}}),
		prefix: harness.RandomPrefix()}
	w.svc = w.replica(t, lockcore.Options{})
	ctx := context.Background()
	ahead := time.Now().Add(time.Hour).UnixMicro()
	w.redis.MustDo(t, "SET", w.floor(), strconv.FormatInt(ahead, 10))

	last := ahead
	next := func(what string, g lockcore.Grant) {
		t.Helper()
		assert.Equal(t, last+1, g.Fence, "%s: one more than the last fence granted", what)
		last = g.Fence
	}
	g := w.hold(t, w.svc, "a", "first", time.Minute)
	next("a first grant", g)
	_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef("a"), Token: g.Token})
	require.NoError(t, err)
	next("after a release", w.hold(t, w.svc, "a", "second", 50*time.Millisecond))
	pollUntil(t, 5*time.Second, "the lease to expire", func() bool {
		return w.redis.MustDo(t, "EXISTS", w.key("a", "")) == "0"
	})
	next("after an expiry", w.hold(t, w.svc, "a", "third", time.Minute))
	next("another name", w.hold(t, w.svc, "b", "other", time.Minute))
	r, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "c", Mode: lockcore.Shared, Owner: "reader", TTL: time.Minute})
	require.NoError(t, err)
	next("a shared hold", r)
	p, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "a", Kind: lockcore.KindSemaphore, Permits: 2, Owner: "permit", TTL: time.Minute})
	require.NoError(t, err)
	next("a semaphore permit", p)

	require.NoError(t, w.redis.Stop())
	require.NoError(t, w.redis.Restart())
	var after lockcore.Grant
	pollUntil(t, 10*time.Second, "a grant after the Redis restart", func() bool {
		after, err = w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "d", Owner: "after", TTL: time.Minute})
		return err == nil
	})
	next("after a restart of Redis", after)
}
