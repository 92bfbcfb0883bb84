package interop

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/redisson"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestClusterWakesBothKindsOfRedissonClient: on a Redis Cluster, Redisson 3.22+ listens and
// publishes with sharded pub/sub (SSUBSCRIBE, SPUBLISH) and older Redisson (and node-redisson)
// with classic pub/sub, and neither hears the other's kind. The gateway publishes both ways and
// listens both ways: each kind of client is woken by the gateway's release, and the gateway's
// waiter by each kind's unlock.
func TestClusterWakesBothKindsOfRedissonClient(t *testing.T) {
	t.Parallel()
	w := newClusterWorld(t)
	ctx := t.Context()
	for _, kind := range []struct {
		name    string
		classic bool
	}{{"sharded", false}, {"classic", true}} {
		var c *redisson.Client
		if kind.classic {
			c = w.jvm(t, redisson.Options{}, true)
		} else {
			c = w.jvm(t, redisson.Options{})
		}
		name := "rs.cluster." + kind.name
		l := c.Lock(name, 1)

		// The gateway holds (TTL 60 s); the Redisson client waits and is woken by the release.
		g := w.acquire(name, testkit.AcquireBody("web", 60_000))
		require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
		done := make(chan time.Time, 1)
		go func() {
			ok, err := l.TryLock(ctx, 20*time.Second, 30*time.Second)
			if err != nil || !ok {
				t.Errorf("%s Redisson's tryLock: %v %v", kind.name, ok, err)
			}
			done <- time.Now()
		}()
		// Its subscription is made before its second try: wait until it is on the slot's node.
		node := w.rig.NodeForKey(name)
		channel := "redisson_lock__channel:{" + name + "}"
		testkit.EventuallyPaced(t, 10*time.Second, kind.name+" Redisson's subscription", func() bool {
			cmd := []string{"PUBSUB", "SHARDNUMSUB", channel}
			if kind.classic {
				cmd = []string{"PUBSUB", "NUMSUB", channel}
			}
			for _, n := range w.rig.Nodes() { // a classic subscription may be on any node, a replica too
				if !kind.classic && n.Addr != node.Addr {
					continue
				}
				if r, err := n.DoList(cmd...); err == nil && len(r) == 2 && r[1] != "0" {
					return true
				}
			}
			return false
		})
		released := time.Now()
		w.release(t, name, g)
		got := testkit.Receive(t, done, 15*time.Second, kind.name+" Redisson's tryLock")
		within(t, got.Sub(released), time.Second, kind.name+" Redisson's grant after the gateway's release")

		// Redisson holds (30 s); the gateway's waiter is woken by its unlock.
		waiting := testkit.StartWaiter(w.Client, ctx, name, "web", 5000, 15_000)
		testkit.EventuallyPaced(t, 10*time.Second, "the gateway waiter in line", func() bool { return w.Waiters(t, name) == 1 })
		unlocked := time.Now()
		require.NoError(t, l.Unlock(ctx))
		r := testkit.Receive(t, waiting, 15*time.Second, "the gateway waiter")
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		within(t, time.Since(unlocked), time.Second, "the gateway's grant after "+kind.name+" Redisson's unlock")
		w.release(t, name, r)
	}
}
