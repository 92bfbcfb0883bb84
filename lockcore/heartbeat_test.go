package lockcore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// scriptCounter is an Observer that counts script calls by name.
type scriptCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *scriptCounter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

func (c *scriptCounter) ScriptCall(name string, _ bool, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[name]++
}

func (*scriptCounter) Granted(string, lockcore.Mode, lockcore.GrantHow, time.Duration) {}
func (*scriptCounter) HoldReleased(string, lockcore.Mode, time.Duration)               {}
func (*scriptCounter) Refused(string)                                                  {}
func (*scriptCounter) Lost(string)                                                     {}
func (*scriptCounter) ForceReleased(string)                                            {}
func (*scriptCounter) WaitStarted(string)                                              {}
func (*scriptCounter) WaitEnded(string, lockcore.WaitOutcome)                          {}
func (*scriptCounter) WatchdogSwept(int)                                               {}
func (*scriptCounter) WatchdogRenewal(string)                                          {}
func (*scriptCounter) RedisError()                                                     {}
func (*scriptCounter) Resubscribed()                                                   {}
func (*scriptCounter) ElectionLogged(string)                                           {}

// TestWaitersOnManyLocksStayInLine: 500 locks, each held and each with one waiter of this
// replica. Every waiter stays in line through four liveness windows, kept there by one keepalive
// call per 100 locks per beat rather than a script call per lock (heartbeat.go): nothing changes,
// so no lock needs heartbeat.lua. The locks then go to their waiters.
func TestWaitersOnManyLocksStayInLine(t *testing.T) {
	t.Parallel()
	const n = 500
	obs := &scriptCounter{}
	w := newWaitWorld(t, lockcore.Options{Observer: obs})
	ctx := context.Background()
	holders := make([]lockcore.Grant, n)
	waits := make([]<-chan acquired, n)
	for i := range n {
		lock := "many-" + strconv.Itoa(i)
		holders[i] = w.hold(t, w.svc, lock, "holder", time.Minute)
		waits[i] = acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	}
	pollUntil(t, 20*time.Second, "every waiter queued", func() bool { return w.svc.Parked() == n && w.queued(t, n) == n })

	keepalives, checks := obs.count("keepalive"), obs.count("heartbeat")
	start := time.Now()
	// Four liveness windows: an entry no beat refreshed would have been pruned by now.
	for end := start.Add(3 * time.Second); time.Now().Before(end); <-time.After(500 * time.Millisecond) {
		require.Equal(t, n, w.queued(t, n), "every waiter stays in line")
	}
	beats := int(time.Since(start)/(250*time.Millisecond)) + 2
	assert.LessOrEqual(t, obs.count("keepalive")-keepalives, beats*n/100, "one keepalive call per 100 locks per beat")
	assert.Equal(t, 0, obs.count("heartbeat")-checks, "no lock needed a closer look")

	for i := range n {
		_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef("many-" + strconv.Itoa(i)), Token: holders[i].Token})
		require.NoError(t, err)
	}
	for i := range n {
		r := receive(t, waits[i], 10*time.Second, fmt.Sprintf("the grant of many-%d", i))
		require.NoError(t, r.err)
		assert.Equal(t, "waiter", r.grant.Owner)
	}
}

// queued counts the entries refreshed lately in the queues of many-0 .. many-(n-1) (see
// refreshedSince).
func (w *waitWorld) queued(t *testing.T, n int) int {
	t.Helper()
	total := 0
	now := refreshedSince()
	for i := range n {
		c, err := strconv.Atoi(w.redis.MustDo(t, "ZCOUNT", w.key("many-"+strconv.Itoa(i), ":qd"), now, "+inf"))
		require.NoError(t, err)
		total += c
	}
	return total
}

// refreshedSince is the least liveness deadline (ms) of an entry its replica refreshed lately: one
// liveness window (750 ms) of slack past now, so that a beat late on a loaded machine does not
// count as none, while an entry no beat refreshes falls below it within 1.5 s of its last refresh.
func refreshedSince() string {
	return strconv.FormatInt(time.Now().Add(-750*time.Millisecond).UnixMilli(), 10)
}

// TestExpiryWithoutItsHintIsFound: the holder's hash vanishes with no script run and no message
// (as when an expiry's hint was lost, or the expiry the waiter's replica planned to check at
// moved), and the lock is handed to its waiter all the same: the beat finds a lock with waiters
// that nothing holds, and its check hands it on.
func TestExpiryWithoutItsHintIsFound(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	const lock = "silent"
	w.hold(t, w.svc, lock, "holder", time.Minute)
	wait := acquireAsync(context.Background(), w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)
	w.redis.MustDo(t, "DEL", w.key(lock, ""))
	r := receive(t, wait, 3*time.Second, "the waiter's grant")
	require.NoError(t, r.err)
	assert.Equal(t, "waiter", r.grant.Owner)
}

// TestLostQueueEntryQueuesAgain: Redis loses a waiter's queue entry (its queue keys deleted by
// hand, as a restart without persistence would). The beat finds the entry missing, and the waiter
// queues again; a release then hands it the lock.
func TestLostQueueEntryQueuesAgain(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "forgot"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)
	wait := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)
	w.redis.MustDo(t, "DEL", w.key(lock, ":q"), w.key(lock, ":qd"), w.key(lock, ":qm"))
	w.awaitWaiters(t, lock, 1)
	_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
	require.NoError(t, err)
	r := receive(t, wait, 3*time.Second, "the waiter's grant")
	require.NoError(t, r.err)
	assert.Equal(t, "waiter", r.grant.Owner)
}

// TestClusterStalledMasterDoesNotStallOtherWaiters: on Redis Cluster one master stalls (DEBUG
// SLEEP, shorter than the cluster's node timeout, so no failover) while this replica has a waiter
// on a lock there and one on a lock of another master. The beat must go on for the healthy master
// (a beat that waited for the stalled call would let that waiter's entry lapse after 750 ms), and
// a release there meanwhile hands the lock to its waiter at once.
func TestClusterStalledMasterDoesNotStallOtherWaiters(t *testing.T) {
	t.Parallel()
	rig := harness.NewClusterRig(t, harness.ClusterOptions{NodeTimeout: 15 * time.Second})
	prefix := harness.RandomPrefix()
	svc := newServiceOn(t, lockcore.Tune(rueidis.ClientOption{InitAddress: rig.SeedAddrs()}), lockcore.Options{KeyPrefix: prefix})
	key := func(name, suffix string) string { return prefix + "{" + name + "}" + suffix }

	stalled, healthy := "stalled", ""
	stalledNode := rig.NodeForKey(key(stalled, ""))
	for i := 0; healthy == ""; i++ {
		if name := "healthy-" + strconv.Itoa(i); rig.NodeForKey(key(name, "")).Addr != stalledNode.Addr {
			healthy = name
		}
	}
	healthyNode := rig.NodeForKey(key(healthy, ""))
	ctx := context.Background()
	hold := func(name string) lockcore.Grant {
		g, err := svc.Acquire(ctx, lockcore.AcquireRequest{Lock: name, Owner: "holder", TTL: time.Minute})
		require.NoError(t, err)
		return g
	}
	hold(stalled)
	holder := hold(healthy)
	acquireAsync(ctx, svc, lockcore.AcquireRequest{Lock: stalled, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	wait := acquireAsync(ctx, svc, lockcore.AcquireRequest{Lock: healthy, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	live := func(node *harness.Redis, name string) bool {
		n, err := node.Do("ZCOUNT", key(name, ":qd"), refreshedSince(), "+inf")
		return err == nil && n == "1"
	}
	pollUntil(t, 10*time.Second, "both waiters queued", func() bool { return live(stalledNode, stalled) && live(healthyNode, healthy) })

	slept := make(chan error, 1)
	go func() { _, err := stalledNode.Do("DEBUG", "SLEEP", "2.5"); slept <- err }()
	// Three liveness windows of the stall: the healthy lock's waiter stays in line throughout.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); <-time.After(100 * time.Millisecond) {
		require.True(t, live(healthyNode, healthy), "the waiter on the healthy master stays in line")
	}
	released := time.Now()
	_, err := svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(healthy), Token: holder.Token})
	require.NoError(t, err)
	r := receive(t, wait, 5*time.Second, "the healthy lock's waiter's grant")
	require.NoError(t, r.err)
	assert.Less(t, time.Since(released), time.Second, "handed on at once, not when the stall ended")
	require.NoError(t, <-slept)
}
