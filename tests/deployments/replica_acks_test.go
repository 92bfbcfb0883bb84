package deployments

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// Replica-acknowledged grants (LEASEGATE_REPLICA_ACKS): a grant is answered 201 only once a
// replica has it, and undone (503) when no replica acknowledges it in time.

// newReplicatedRedis starts a master and one replica of it, and waits until the replica is in sync.
func newReplicatedRedis(t *testing.T) (master, replica *harness.Redis) {
	t.Helper()
	master = harness.NewRedis(t, harness.RedisOptions{})
	replica = harness.NewRedis(t, harness.RedisOptions{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	harness.Eventually(t, 10*time.Second, "the replica in sync", func() bool {
		info, err := replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return master, replica
}

// ackedGateway starts a master with one replica in sync and a gateway on it whose grants wait
// 2 s for one replica's acknowledgement, and returns a client of it. (With 200 ms, a grant made
// while the replica was still there was now and then refused on a busy machine: see
// TestClusterReplicaAckedGrants.)
func ackedGateway(t *testing.T) (master, replica *harness.Redis, c *harness.Client) {
	t.Helper()
	master, replica = newReplicatedRedis(t)
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: master, Env: map[string]string{
		"LEASEGATE_REPLICA_ACKS": "1", "LEASEGATE_REPLICA_ACK_TIMEOUT": "2s"}})
	return master, replica, harness.NewClient(t, gw.URL)
}

// loseReplica kills replica and waits until master sees no replica.
func loseReplica(t *testing.T, master, replica *harness.Redis) {
	t.Helper()
	require.NoError(t, replica.Kill())
	harness.Eventually(t, 10*time.Second, "the master sees no replica", func() bool {
		info, err := master.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})
}

func TestReplicaAckedGrantIsOnTheReplicaWhenAnswered(t *testing.T) {
	t.Parallel()
	master, replica := newReplicatedRedis(t)
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: master, Env: map[string]string{
		"LEASEGATE_REPLICA_ACKS": "1", "LEASEGATE_REPLICA_ACK_TIMEOUT": "5s"}}) // generous: see TestClusterReplicaAckedGrants
	c := harness.NewClient(t, gw.URL)
	key := gw.KeyPrefix + "{acked}"

	g := c.Do(http.MethodPost, "/locks/acked", nil, testkit.AcquireBody("writer", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	// No polling: the replica has acknowledged the grant before the 201.
	assert.Equal(t, "writer", replica.MustDo(t, "HGET", key, ":owner"), "the replica holds the grant when it is answered")
	assert.Equal(t, strconv.FormatInt(g.Int("fence"), 10), replica.MustDo(t, "HGET", key, ":fence"))

	r := c.Do(http.MethodPost, "/locks/acked/renew", testkit.TokenHeader(g.Str("token")), `{"ttl_ms":90000}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	pttl, err := strconv.ParseInt(replica.MustDo(t, "PTTL", key), 10, 64)
	require.NoError(t, err)
	assert.Greater(t, pttl, int64(60000), "the renewal is on the replica when answered")

	// A waiter's grant too: it is answered once its confirmation is replicated.
	ch := make(chan *harness.Response, 1)
	go func() {
		ch <- c.Do(http.MethodPost, "/locks/acked", nil, `{"owner":"next","ttl_ms":60000,"wait_ms":10000}`)
	}()
	harness.Eventually(t, 5*time.Second, "a waiter queued", func() bool {
		return c.Do(http.MethodGet, "/locks/acked", nil, "").Int("waiters") == 1
	})
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/acked", testkit.TokenHeader(g.Str("token")), "").Status)
	n := testkit.Receive(t, ch, 10*time.Second, "the waiter's grant")
	require.Equal(t, http.StatusCreated, n.Status, "%s", n.Body)
	assert.Equal(t, "next", replica.MustDo(t, "HGET", key, ":owner"))
	pttl, err = strconv.ParseInt(replica.MustDo(t, "PTTL", key), 10, 64)
	require.NoError(t, err)
	assert.Greater(t, pttl, int64(30000), "the waiter's full TTL, not its claim, is on the replica")

	// A multi-lock's grant.
	m := testkit.LockAll(c, "mover", []string{"acked-a", "acked-b"}, 60000, 0, "")
	require.Equal(t, http.StatusCreated, m.Status, "%s", m.Body)
	assert.Equal(t, "mover", replica.MustDo(t, "HGET", gw.KeyPrefix+"{acked-b}", ":owner"))
}

func TestReplicaAckedGrantIsUndoneWithoutAReplica(t *testing.T) {
	t.Parallel()
	master, replica, c := ackedGateway(t)
	held := c.Do(http.MethodPost, "/locks/kept", nil, testkit.AcquireBody("early", 60000))
	require.Equal(t, http.StatusCreated, held.Status, "%s", held.Body)

	loseReplica(t, master, replica)

	start := time.Now()
	r := c.Do(http.MethodPost, "/locks/unacked", nil, testkit.AcquireBody("late", 60000))
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "urn:leasegate:problem:backend-unavailable", r.Str("type"))
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "it waited for the acknowledgement")
	st := c.Do(http.MethodGet, "/locks/unacked", nil, "")
	assert.Equal(t, false, st.JSON()["held"], "the unacknowledged grant was undone: %s", st.Body)

	r = c.Do(http.MethodPost, "/multilocks", nil, testkit.MultiBody("mover", []string{"u1", "u2"}, 60000, 0, ""))
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	for _, name := range []string{"u1", "u2"} {
		assert.Equal(t, false, c.Do(http.MethodGet, "/locks/"+name, nil, "").JSON()["held"], name)
	}

	r = c.Do(http.MethodPost, "/locks/kept/renew", testkit.TokenHeader(held.Str("token")), "")
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "an unacknowledged renewal is not confirmed: %s", r.Body)
	assert.Equal(t, "early", c.Do(http.MethodGet, "/locks/kept", nil, "").Str("owner"), "the lease itself is kept")

	// Releases need no acknowledgement.
	rel := c.Do(http.MethodDelete, "/locks/kept", testkit.TokenHeader(held.Str("token")), "")
	assert.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)

	require.NoError(t, replica.Restart())
	harness.Eventually(t, 10*time.Second, "grants acknowledged again", func() bool {
		r := c.Do(http.MethodPost, "/locks/back", nil, testkit.AcquireBody("again", 60000))
		return r.Status == http.StatusCreated
	})
}

// TestReplicaAckedReentryUndoesOnlyItsOwnHold: a re-entry the replicas do not acknowledge is
// answered 503 and gives back the one hold it took, never the lease's earlier holds; a re-entry
// or renewal that took nothing (the lease is gone, a semaphore of another size) answers what it
// found, not 503, and takes nothing back.
func TestReplicaAckedReentryUndoesOnlyItsOwnHold(t *testing.T) {
	t.Parallel()
	master, replica, c := ackedGateway(t)

	g := c.Do(http.MethodPost, "/locks/re", nil, testkit.AcquireBody("worker", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	again := c.Do(http.MethodPost, "/locks/re", testkit.TokenHeader(g.Str("token")), testkit.AcquireBody("worker", 60000))
	require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
	require.Equal(t, int64(2), again.Int("holds"))
	permit := c.Do(http.MethodPost, "/semaphores/pool", nil, testkit.PermitBody("worker", 3, 60000, 0))
	require.Equal(t, http.StatusCreated, permit.Status, "%s", permit.Body)
	gone := c.Do(http.MethodPost, "/locks/gone", nil, testkit.AcquireBody("worker", 60000))
	require.Equal(t, http.StatusCreated, gone.Status, "%s", gone.Body)
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/gone", testkit.TokenHeader(gone.Str("token")), "").Status)

	loseReplica(t, master, replica)

	r := c.Do(http.MethodPost, "/locks/re", testkit.TokenHeader(g.Str("token")), testkit.AcquireBody("worker", 60000))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "an unacknowledged re-entry: %s", r.Body)
	st := c.Do(http.MethodGet, "/locks/re", nil, "")
	assert.Equal(t, int64(2), st.Int("holds"), "the re-entry's hold, and only it, was given back: %s", st.Body)

	r = c.Do(http.MethodPost, "/semaphores/pool", testkit.TokenHeader(permit.Str("token")), testkit.PermitBody("worker", 4, 60000, 0))
	assert.Equal(t, http.StatusConflict, r.Status, "a re-entry with another size is refused, not 503: %s", r.Body)
	r = c.Do(http.MethodPost, "/locks/gone", testkit.TokenHeader(gone.Str("token")), testkit.AcquireBody("worker", 60000))
	assert.Equal(t, http.StatusGone, r.Status, "a re-entry of a lease that holds nothing is 410, not 503: %s", r.Body)
	r = c.Do(http.MethodPost, "/locks/gone/renew", testkit.TokenHeader(gone.Str("token")), "")
	assert.Equal(t, http.StatusGone, r.Status, "so is its renewal: %s", r.Body)

	// Releases need no acknowledgement: two holds, two releases, then the lock is free.
	for i, left := range []bool{true, false} {
		rel := c.Do(http.MethodDelete, "/locks/re", testkit.TokenHeader(g.Str("token")), "")
		require.Equal(t, http.StatusOK, rel.Status, "release %d: %s", i+1, rel.Body)
		assert.Equal(t, left, c.Do(http.MethodGet, "/locks/re", nil, "").JSON()["held"], "after release %d", i+1)
	}
	rel := c.Do(http.MethodDelete, "/semaphores/pool", testkit.TokenHeader(permit.Str("token")), "")
	assert.Equal(t, http.StatusOK, rel.Status, "the permit was kept: %s", rel.Body)
}

// TestReplicaAcksAllNeedsSentinelOrCluster: "every replica" needs a deployment that keeps a record
// of its replicas; on a single Redis the gateway refuses to start, saying what to set instead.
func TestReplicaAcksAllNeedsSentinelOrCluster(t *testing.T) {
	t.Parallel()
	r := harness.NewRedis(t, harness.RedisOptions{})
	_, err := harness.StartGateway(t.TempDir(), harness.GatewayOptions{Redis: r, Env: map[string]string{"LEASEGATE_REPLICA_ACKS": "all"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "LEASEGATE_REPLICA_ACKS=all needs Sentinel or a Cluster")
	_, err = harness.StartGateway(t.TempDir(), harness.GatewayOptions{Redis: r, Env: map[string]string{"LEASEGATE_REPLICA_ACKS": "most"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"most" is neither a number of replicas (0 or more) nor "all"`)
}

// TestReplicaAckedHandOffWaitsForAReplica: the grant a release hands to a waiter is answered only
// once a replica acknowledged it, also when the waiter waits on the gateway that releases (which
// hands its own waiters their grants without a confirmation where grants are not acknowledged).
func TestReplicaAckedHandOffWaitsForAReplica(t *testing.T) {
	t.Parallel()
	master, replica, c := ackedGateway(t)
	held := c.Do(http.MethodPost, "/locks/handed", nil, testkit.AcquireBody("first", 60000))
	require.Equal(t, http.StatusCreated, held.Status, "%s", held.Body)
	ch := make(chan *harness.Response, 1)
	go func() {
		ch <- c.Do(http.MethodPost, "/locks/handed", nil, `{"owner":"next","ttl_ms":60000,"wait_ms":6000}`)
	}()
	harness.Eventually(t, 5*time.Second, "a waiter queued", func() bool {
		return c.Do(http.MethodGet, "/locks/handed", nil, "").Int("waiters") == 1
	})

	loseReplica(t, master, replica)
	rel := c.Do(http.MethodDelete, "/locks/handed", testkit.TokenHeader(held.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "releases need no acknowledgement: %s", rel.Body)
	w := testkit.Receive(t, ch, 15*time.Second, "the waiter's answer")
	assert.Contains(t, []int{http.StatusConflict, http.StatusServiceUnavailable}, w.Status,
		"a hand-off no replica acknowledged is not answered as a grant: %d %s", w.Status, w.Body)
	harness.Eventually(t, 5*time.Second, "the unanswered hand-off given back", func() bool {
		return c.Do(http.MethodGet, "/locks/handed", nil, "").JSON()["held"] == false
	})
}
