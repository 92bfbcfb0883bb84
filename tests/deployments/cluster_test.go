package deployments

import (
	"cmp"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// Redis Cluster: three masters with a replica each, two gateway replicas.

type clusterWorld struct {
	rig     *harness.ClusterRig
	prefix  string
	clients []*harness.Client
}

func newClusterWorld(t *testing.T, env map[string]string) *clusterWorld {
	t.Helper()
	rig := harness.NewClusterRig(t, harness.ClusterOptions{})
	w := &clusterWorld{rig: rig, prefix: harness.RandomPrefix()}
	for range 2 {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		gw := harness.NewGateway(t, harness.GatewayOptions{RedisURL: rig.URL(), KeyPrefix: w.prefix, Env: e})
		w.clients = append(w.clients, harness.NewClient(t, gw.URL))
	}
	return w
}

func (w *clusterWorld) c(i int) *harness.Client { return w.clients[i%2] }

// lockKey is the Redis key of lock name's exclusive holder.
func (w *clusterWorld) lockKey(name string) string { return w.prefix + "{" + name + "}" }

// otherMaster returns a master other than from.
func (w *clusterWorld) otherMaster(t *testing.T, from *harness.Redis) *harness.Redis {
	t.Helper()
	for _, m := range w.rig.Masters() {
		if m.Addr != from.Addr {
			return m
		}
	}
	t.Fatalf("no master besides %s", from.Addr)
	return nil
}

// namesOnDistinctMasters returns n lock names whose keys live on n different masters.
func (w *clusterWorld) namesOnDistinctMasters(t *testing.T, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for i := 0; len(out) < n && i < 1000; i++ {
		name := "cl-" + strconv.Itoa(i)
		if node := w.rig.NodeForKey(w.lockKey(name)); !seen[node.Addr] {
			seen[node.Addr] = true
			out = append(out, name)
		}
	}
	require.Len(t, out, n)
	return out
}

func TestClusterLocksWaitersWatchdogsAndMultiLocks(t *testing.T) {
	t.Parallel()
	w := newClusterWorld(t, nil)
	names := w.namesOnDistinctMasters(t, 3)

	// A hand-off across replicas, through sharded pub/sub on the lock's node.
	g := w.c(0).Do(http.MethodPost, "/locks/"+names[0], nil, testkit.AcquireBody("holder", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	ch := make(chan *harness.Response, 1)
	go func() {
		ch <- w.c(1).Do(http.MethodPost, "/locks/"+names[0], nil, `{"owner":"waiter","ttl_ms":60000,"wait_ms":10000}`)
	}()
	harness.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
		return w.c(0).Do(http.MethodGet, "/locks/"+names[0], nil, "").Int("waiters") == 1
	})
	require.Equal(t, http.StatusOK, w.c(0).Do(http.MethodDelete, "/locks/"+names[0], testkit.TokenHeader(g.Str("token")), "").Status)
	n := testkit.Receive(t, ch, 5*time.Second, "the waiter's grant")
	require.Equal(t, http.StatusCreated, n.Status, "%s", n.Body)
	assert.Greater(t, n.Int("fence"), g.Int("fence"))

	// A watchdog lease is renewed past its TTL (its schedule is one of the sharded ones). Its TTL is
	// 3 s: a renewal is due at a third of it, and a Cluster's sweep makes a round trip to each of
	// the schedule's 8 shards, so that on a loaded machine renewals come late (600 ms left 400 ms
	// for that; a 2 s TTL still failed here once at a load average over 20).
	wd := w.c(1).Do(http.MethodPost, "/locks/"+names[1], nil, `{"owner":"wd","ttl_ms":3000,"watchdog":true}`)
	require.Equal(t, http.StatusCreated, wd.Status, "%s", wd.Body)
	testkit.Throughout(t, 7500*time.Millisecond, "the watchdog lease stays held past two TTLs", func() bool {
		st := w.c(0).Do(http.MethodGet, "/locks/"+names[1], nil, "")
		if st.Str("owner") != "wd" {
			t.Logf("%s: %d %s", names[1], st.Status, st.Body)
		}
		return st.Str("owner") == "wd"
	})

	// Semaphores and shared holds work as on one Redis.
	for i := range 2 {
		r := w.c(i).Do(http.MethodPost, "/semaphores/"+names[2], nil, `{"owner":"p","permits":2}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	assert.Equal(t, http.StatusConflict, w.c(0).Do(http.MethodPost, "/semaphores/"+names[2], nil, `{"owner":"p","permits":2}`).Status)

	// A multi-lock whose members live on three masters: all or nothing.
	group := []string{"grp-" + names[0], "grp-" + names[1], "grp-" + names[2]}
	blocker := w.c(0).Do(http.MethodPost, "/locks/"+group[2], nil, testkit.AcquireBody("blocker", 60000))
	require.Equal(t, http.StatusCreated, blocker.Status)
	r := testkit.LockAll(w.c(1), "mover", group, 60000, 0, "")
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Equal(t, []string{group[2]}, testkit.Strings(r, "locks"))
	for _, name := range group[:2] {
		assert.Equal(t, false, w.c(0).Do(http.MethodGet, "/locks/"+name, nil, "").JSON()["held"], "%s: nothing kept from a refused group", name)
	}
	ch = make(chan *harness.Response, 1)
	go func() { ch <- testkit.LockAll(w.c(1), "mover", group, 60000, 10000, "") }()
	harness.Eventually(t, 5*time.Second, "the group waits for the blocked member", func() bool {
		return w.c(0).Do(http.MethodGet, "/locks/"+group[2], nil, "").Int("waiters") == 1
	})
	require.Equal(t, http.StatusOK, w.c(0).Do(http.MethodDelete, "/locks/"+group[2], testkit.TokenHeader(blocker.Str("token")), "").Status)
	m := testkit.Receive(t, ch, 10*time.Second, "the group's grant")
	require.Equal(t, http.StatusCreated, m.Status, "%s", m.Body)
	for _, name := range group {
		assert.Equal(t, m.Str("id"), w.c(0).Do(http.MethodGet, "/locks/"+name, nil, "").Str("multilock"), name)
	}
	// One member lost ends the group on every node.
	w.rig.NodeForKey(w.lockKey(group[1])).MustDo(t, "DEL", w.lockKey(group[1]))
	rr := w.c(0).Do(http.MethodPost, "/multilocks/renew", testkit.TokenHeader(m.Str("token")), "")
	require.Equal(t, http.StatusGone, rr.Status, "%s", rr.Body)
	assert.Equal(t, []string{group[1]}, testkit.Strings(rr, "locks"))
	for _, name := range group {
		assert.Equal(t, false, w.c(0).Do(http.MethodGet, "/locks/"+name, nil, "").JSON()["held"], name)
	}
}

// TestClusterMasterFailoverAndSlotMigration: the master serving a held, contended lock fails over,
// then the lock's slot moves to another master; the holder keeps its lease throughout, the waiter
// its place, and fences keep rising.
func TestClusterMasterFailoverAndSlotMigration(t *testing.T) {
	t.Parallel()
	w := newClusterWorld(t, nil)
	name := w.namesOnDistinctMasters(t, 1)[0]
	key := w.lockKey(name)
	g := w.c(0).Do(http.MethodPost, "/locks/"+name, nil, testkit.AcquireBody("holder", 120000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	wd := w.c(0).Do(http.MethodPost, "/locks/"+name+"-wd", nil, `{"owner":"wd","ttl_ms":8000,"watchdog":true}`)
	require.Equal(t, http.StatusCreated, wd.Status, "%s", wd.Body)
	ch := make(chan *harness.Response, 1)
	go func() {
		ch <- w.c(1).Do(http.MethodPost, "/locks/"+name, nil, `{"owner":"waiter","ttl_ms":60000,"wait_ms":55000}`)
	}()
	harness.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
		return w.c(0).Do(http.MethodGet, "/locks/"+name, nil, "").Int("waiters") == 1
	})
	require.NoError(t, w.rig.WaitReplicated(5*time.Second))

	require.NoError(t, w.rig.KillMaster(w.rig.NodeForKey(key).Addr))
	_, err := w.rig.AwaitFailover(20 * time.Second)
	require.NoError(t, err)
	st := retry503(t, w.c(0), http.MethodGet, "/locks/"+name, nil, "")
	require.Equal(t, http.StatusOK, st.Status, "%s", st.Body)
	assert.Equal(t, "holder", st.Str("owner"), "the holder's lease survived the failover")

	// Move the lock's slot to another master, keys and all.
	slot := harness.KeySlot(key)
	from := w.rig.NodeForSlot(slot)
	to := w.otherMaster(t, from)
	require.NoError(t, w.rig.MigrateSlot(slot, from, to))
	assert.Equal(t, to.Addr, w.rig.NodeForKey(key).Addr)

	rel := retry503(t, w.c(0), http.MethodDelete, "/locks/"+name, harness.Headers{"Lease-Token": g.Str("token"), "Idempotency-Key": "rel-1"}, "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	n := testkit.Receive(t, ch, 20*time.Second, "the waiter's grant after failover and migration")
	require.Equal(t, http.StatusCreated, n.Status, "%s", n.Body)
	assert.Greater(t, n.Int("fence"), g.Int("fence"), "fences keep rising")
	assert.Equal(t, "wd", w.c(1).Do(http.MethodGet, "/locks/"+name+"-wd", nil, "").Str("owner"), "the watchdog lease lived through both")
}

// TestClusterReplicaAckedGrants: with LEASEGATE_REPLICA_ACKS=1 a grant is on its master's replica
// when answered (WAIT goes to the node that ran the script).
func TestClusterReplicaAckedGrants(t *testing.T) {
	t.Parallel()
	// A generous ack timeout: under the full suite's load a replica's acknowledgement has taken
	// over the default 500 ms (this test is about where the grant is when answered, not how fast).
	w := newClusterWorld(t, map[string]string{"LEASEGATE_REPLICA_ACKS": "1", "LEASEGATE_REPLICA_ACK_TIMEOUT": "5s"})
	// A replica whose link is up may still be loading its first sync: until it is online, its
	// master cannot have a write acknowledged.
	require.NoError(t, w.rig.WaitReplicated(10*time.Second))
	for _, name := range w.namesOnDistinctMasters(t, 3) {
		g := w.c(0).Do(http.MethodPost, "/locks/"+name, nil, testkit.AcquireBody("acked", 60000))
		require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
		master := w.rig.NodeForKey(w.lockKey(name))
		replica := w.rig.ReplicaOf(master)
		require.NotNil(t, replica, "a replica of %s", master.Addr)
		// KEYS has no key to redirect on: it lists the replica's own keyspace.
		assert.Equal(t, w.lockKey(name), replica.MustDo(t, "KEYS", w.lockKey(name)), "%s: on the replica when answered", name)
	}
	m := testkit.LockAll(w.c(1), "mover", []string{"ack-a", "ack-b", "ack-c"}, 60000, 0, "")
	require.Equal(t, http.StatusCreated, m.Status, "%s", m.Body)
}

// TestClusterAckedGrantsThroughSlotMigrations: with LEASEGATE_REPLICA_ACKS=1, clients take and
// give back one lock as fast as they can while its slot migrates back and forth between masters
// (MOVED, ASK and TRYAGAIN on the way). Every gateway stays up (the script and WAIT once went
// through a rueidis path that panicked on the redirects, killing the process), no two clients
// hold the lock at once, fences rise in grant order, and every grant's release finds it held.
func TestClusterAckedGrantsThroughSlotMigrations(t *testing.T) {
	t.Parallel()
	w := newClusterWorld(t, map[string]string{"LEASEGATE_REPLICA_ACKS": "1", "LEASEGATE_REPLICA_ACK_TIMEOUT": "5s"})
	require.NoError(t, w.rig.WaitReplicated(10*time.Second))
	name := w.namesOnDistinctMasters(t, 1)[0]
	slot := harness.KeySlot(w.lockKey(name))

	var (
		holder                 atomic.Int64 // the worker holding the lock as its client believes, or -1
		mu                     sync.Mutex
		fences                 []int64 // in grant order
		overlaps, lost, broken atomic.Int64
		stop                   atomic.Bool
		wg                     sync.WaitGroup
	)
	holder.Store(-1)
	for i := range 6 {
		wg.Go(func() {
			c := w.c(i)
			for k := 0; !stop.Load() && k < 100000; k++ {
				body := fmt.Sprintf(`{"owner":"w%d","ttl_ms":10000,"wait_ms":3000}`, i)
				r, err := c.Send(t.Context(), http.MethodPost, "/locks/"+name, nil, body)
				if err != nil {
					broken.Add(1)
					return // the gateway died: the assertion below says so
				}
				if r.Status != http.StatusCreated {
					continue
				}
				if !holder.CompareAndSwap(-1, int64(i)) {
					overlaps.Add(1)
				}
				mu.Lock()
				fences = append(fences, r.Int("fence"))
				mu.Unlock()
				// The work: the lock is this grant's, as Redis has it (through the migrations).
				st, err := c.Send(t.Context(), http.MethodGet, "/locks/"+name, nil, "")
				for try := 0; try < 40 && err == nil && st.Status == http.StatusServiceUnavailable; try++ {
					st, err = c.Send(t.Context(), http.MethodGet, "/locks/"+name, nil, "")
				}
				if err != nil || st.Str("owner") != fmt.Sprintf("w%d", i) || st.Int("fence") != r.Int("fence") {
					lost.Add(1)
					t.Errorf("w%d: its grant (fence %d) is not what the lock holds: %v %v", i, r.Int("fence"), st, err)
				}
				holder.CompareAndSwap(int64(i), -1) // the release is about to be sent: no longer believed held
				h := harness.Headers{"Lease-Token": r.Str("token"), "Idempotency-Key": fmt.Sprintf("rel-%d-%d", i, k)}
				rel, err := c.Send(t.Context(), http.MethodDelete, "/locks/"+name, h, "")
				for try := 0; try < 40 && (err != nil || rel.Status == http.StatusServiceUnavailable); try++ {
					if err != nil {
						broken.Add(1)
					}
					rel, err = c.Send(t.Context(), http.MethodDelete, "/locks/"+name, h, "")
				}
				if err != nil || rel.Status != http.StatusOK {
					lost.Add(1)
					t.Errorf("w%d: the release of a grant (fence %d) answered %v %v", i, r.Int("fence"), rel, err)
				}
			}
		})
	}
	granted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(fences)
	}
	for m := range 20 {
		before := granted()
		harness.Eventually(t, 20*time.Second, "grants go on between migrations", func() bool { return granted() >= before+3 })
		from := w.rig.NodeForSlot(slot)
		require.NoError(t, w.rig.MigrateSlot(slot, from, w.otherMaster(t, from)), "migration %d", m+1)
	}
	stop.Store(true)
	wg.Wait()

	t.Logf("%d grants through 20 migrations; %d requests without an answer", granted(), broken.Load())
	assert.Zero(t, overlaps.Load(), "two clients held the lock at once")
	assert.Zero(t, lost.Load(), "grants lost")
	assert.Zero(t, broken.Load(), "requests without an answer: a gateway died")
	mu.Lock()
	for i := 1; i < len(fences); i++ {
		assert.Greater(t, fences[i], fences[i-1], "fences rise in grant order")
	}
	mu.Unlock()
	for i := range 2 {
		assert.Equal(t, http.StatusOK, w.c(i).Do(http.MethodGet, "/healthz", nil, "").Status, "gateway %d is up", i)
	}
	assert.Equal(t, false, w.c(0).Do(http.MethodGet, "/locks/"+name, nil, "").JSON()["held"])
}

// TestClusterReplicaAcksAll: LEASEGATE_REPLICA_ACKS=all on a Cluster with a replica per master
// waits for that replica; while one replica is down, grants on its master's slots answer 503 (a
// failed replica still counts) and the other masters' grants go on; once it is back, they resume.
func TestClusterReplicaAcksAll(t *testing.T) {
	t.Parallel()
	w := newClusterWorld(t, map[string]string{"LEASEGATE_REPLICA_ACKS": "all", "LEASEGATE_REPLICA_ACK_TIMEOUT": "2s"})
	require.NoError(t, w.rig.WaitReplicated(10*time.Second))
	names := w.namesOnDistinctMasters(t, 2)
	for _, name := range names {
		harness.Eventually(t, 10*time.Second, name+" granted with every replica's acknowledgement", func() bool {
			return w.c(0).Do(http.MethodPost, "/locks/"+name, nil, testkit.AcquireBody("first", 60000)).Status == http.StatusCreated
		})
		replica := w.rig.ReplicaOf(w.rig.NodeForKey(w.lockKey(name)))
		assert.Equal(t, w.lockKey(name), replica.MustDo(t, "KEYS", w.lockKey(name)), "%s: on the replica when answered", name)
	}
	master := w.rig.NodeForKey(w.lockKey(names[0]))
	down := w.rig.ReplicaOf(master)
	require.NoError(t, down.Kill())
	var same, other string // a fresh name on the master whose replica is down, one on another master
	for i := 0; (same == "" || other == "") && i < 1000; i++ {
		n := "fresh-" + strconv.Itoa(i)
		if w.rig.NodeForKey(w.lockKey(n)).Addr == master.Addr {
			same = cmp.Or(same, n)
		} else {
			other = cmp.Or(other, n)
		}
	}
	r := w.c(1).Do(http.MethodPost, "/locks/"+same, nil, testkit.AcquireBody("second", 60000))
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "its master's replica is down: %s", r.Body)
	assert.Equal(t, false, w.c(1).Do(http.MethodGet, "/locks/"+same, nil, "").JSON()["held"], "the unacknowledged grant was undone")
	r = w.c(1).Do(http.MethodPost, "/locks/"+other, nil, testkit.AcquireBody("second", 60000))
	assert.Equal(t, http.StatusCreated, r.Status, "another master's grants go on: %s", r.Body)
	require.NoError(t, down.Restart())
	harness.Eventually(t, 20*time.Second, "grants resume once the replica is back", func() bool {
		return w.c(1).Do(http.MethodPost, "/locks/"+same, nil, testkit.AcquireBody("third", 60000)).Status == http.StatusCreated
	})
}
