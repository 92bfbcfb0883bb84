package redisson

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// TestClusterSharded runs two instances on a Redis Cluster with sharded pub/sub, as Redisson 3.22+
// does on Cluster 7: every key of a lock's script (hash, channel, unlock latch, read-hold keys)
// shares the name's slot, waits SSUBSCRIBE on the node serving it, and releases SPUBLISH there.
func TestClusterSharded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a six-node Redis Cluster")
	}
	rig := harness.NewClusterRig(t, harness.ClusterOptions{})
	opts := Options{Sharded: true}
	a, b := newClient(t, rig.SeedAddrs(), opts), newClient(t, rig.SeedAddrs(), opts)
	ctx := t.Context()

	shardSubscribers := func(name, channel string) string {
		out, err := rig.NodeForKey(name).Do("PUBSUB", "SHARDNUMSUB", channel)
		require.NoError(t, err)
		_, n, _ := strings.Cut(out, "\n")
		return n
	}
	for _, name := range []string{"alpha", "beta", "shop{eu}:cart"} {
		holder := a.Lock(name, 1)
		ok, err := holder.TryLock(ctx, 0, 30*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		waiter := b.Lock(name, 1)
		delay := wakeDelay(t, b, lockChannel(name), waiter.Lock, func() error {
			assert.Equal(t, "1", shardSubscribers(name, lockChannel(name)), "the waiter's SSUBSCRIBE, on the name's node")
			return holder.Unlock(ctx)
		})
		t.Logf("cluster %q: RLock unlock (SPUBLISH 0) -> waiter holds the lock: %v", name, delay)
		assert.Less(t, delay, 5*time.Second)
		require.NoError(t, waiter.Unlock(ctx))
	}

	w := a.ReadWriteLock("gamma").WriteLock(1)
	ok, err := w.TryLock(ctx, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	reader := b.ReadWriteLock("gamma").ReadLock(1)
	delay := wakeDelay(t, b, rwlockChannel("gamma"), reader.Lock, func() error { return w.Unlock(ctx) })
	t.Logf("cluster: write unlock (SPUBLISH 1) -> reader holds the read lock: %v", delay)
	assert.Less(t, delay, 5*time.Second)
	require.NoError(t, reader.Unlock(ctx))
	for _, name := range []string{"alpha", "beta", "shop{eu}:cart", "gamma"} {
		assert.Equal(t, "0", rig.NodeForKey(name).MustDo(t, "EXISTS", name))
	}
}
