package tests

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// pair is two gateway replicas on one Redis, sharing key prefix and token secret.
type pair struct {
	*env
	gw2     *harness.Gateway
	client2 *harness.Client
}

func newPair(t *testing.T) *pair {
	t.Helper()
	e := newEnv(t, nil)
	gw2 := harness.NewGateway(t, e.gatewayOptions(e.gw.KeyPrefix, nil))
	return &pair{env: e, gw2: gw2, client2: harness.NewClient(t, gw2.URL)}
}

// replica returns the client of replica i%2.
func (p *pair) replica(i int) *harness.Client {
	if i%2 == 0 {
		return p.client
	}
	return p.client2
}

func waitBody(owner string, ttlMs, waitMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d}`, owner, ttlMs, waitMs)
}

func (e *env) waiters(t *testing.T, lock string) int64 {
	return e.client.Do(http.MethodGet, "/locks/"+lock, nil, "").Int("waiters")
}

// hold acquires lock (try-once) and returns the grant.
func (e *env) hold(t *testing.T, c *harness.Client, lock, owner string, ttlMs int64) *harness.Response {
	t.Helper()
	r := c.Do(http.MethodPost, "/locks/"+lock, nil, acquireBody(owner, ttlMs))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	return r
}

// startWaiter long-polls in a goroutine; the response arrives on the returned channel.
func startWaiter(c *harness.Client, ctx context.Context, lock, owner string, ttlMs, waitMs int64) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	go func() {
		out <- c.DoContext(ctx, http.MethodPost, "/locks/"+lock, nil, waitBody(owner, ttlMs, waitMs))
	}()
	return out
}

func TestWaitWakesOnReleaseAcrossReplicas(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	a := p.hold(t, p.client, "x", "a", 60000)
	b := startWaiter(p.client2, context.Background(), "x", "b", 30000, 20000)
	eventually(t, 5*time.Second, "b queued", func() bool { return p.waiters(t, "x") == 1 })
	assert.Equal(t, int64(1), p.client2.Do(http.MethodGet, "/locks/x", nil, "").Int("waiters"), "both replicas see the queue")

	require.Equal(t, http.StatusOK, p.client.Do(http.MethodDelete, "/locks/x", tokenHeader(a.Str("token")), "").Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "b", got.Str("owner"))
	assert.Greater(t, got.Int("fence"), a.Int("fence"))
	assert.Equal(t, "/locks/x", got.Header.Get("Location"))
	st := p.client.Do(http.MethodGet, "/locks/x", tokenHeader(got.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"])
	assert.Greater(t, st.Int("ttl_ms"), int64(20000), "the waiter's own TTL replaced the claim")
	assert.Equal(t, int64(0), st.Int("waiters"))
}

func TestWaitWakesOnExpiry(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	a := p.hold(t, p.client, "x", "a", 60000)
	b := startWaiter(p.client2, context.Background(), "x", "b", 30000, 30000)
	eventually(t, 5*time.Second, "b queued", func() bool { return p.waiters(t, "x") == 1 })
	// The holder shortens its lease and then vanishes: expiry publishes nothing.
	require.Equal(t, http.StatusOK, p.client.Do(http.MethodPost, "/locks/x/renew", tokenHeader(a.Str("token")), `{"ttl_ms":200}`).Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "b", got.Str("owner"))
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.hold(t, e.client, "x", "a", 60000)
	r := e.client.Do(http.MethodPost, "/locks/x", nil, waitBody("b", 30000, 200))
	require.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "urn:leasegate:problem:lock-held", r.Str("type"))
	assert.GreaterOrEqual(t, r.Int("waited_ms"), int64(200))
	assert.Greater(t, r.Int("retry_after_ms"), int64(50000))
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, int64(0), e.waiters(t, "x"), "a timed-out waiter leaves the queue")
}

func TestWaitIsFIFOAcrossReplicasWithoutBarging(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	a := p.hold(t, p.client, "fifo", "holder", 60000)
	const n = 15
	results := make([]<-chan *harness.Response, n)
	for i := range n {
		results[i] = startWaiter(p.replica(i), context.Background(), "fifo", "w"+strconv.Itoa(i), 30000, 30000)
		eventually(t, 5*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool { return p.waiters(t, "fifo") == int64(i+1) })
	}
	// No barging: while anyone waits, a try-once fails even when the lock is free for a moment.
	barger := p.client2.Do(http.MethodPost, "/locks/fifo", nil, acquireBody("barger", 1000))
	assert.Equal(t, http.StatusConflict, barger.Status)

	token := a.Str("token")
	for i := range n {
		require.Equal(t, http.StatusOK, p.client.Do(http.MethodDelete, "/locks/fifo", tokenHeader(token), "").Status)
		got := <-results[i]
		require.Equal(t, http.StatusCreated, got.Status, "waiter %d: %s", i, got.Body)
		assert.Equal(t, "w"+strconv.Itoa(i), got.Str("owner"), "grant %d goes to the %d-th arrival", i, i)
		token = got.Str("token")
	}
	require.Equal(t, http.StatusOK, p.client.Do(http.MethodDelete, "/locks/fifo", tokenHeader(token), "").Status)
	assert.Equal(t, false, p.client.Do(http.MethodGet, "/locks/fifo", nil, "").JSON()["held"])
}

func TestDisconnectedWaiterIsDequeuedAndNeverHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.hold(t, e.client, "x", "a", 60000)
	ctx, cancel := context.WithCancel(context.Background())
	gone := startWaiter(e.client, ctx, "x", "gone", 30000, 30000)
	eventually(t, 5*time.Second, "queued", func() bool { return e.waiters(t, "x") == 1 })
	cancel()
	<-gone
	eventually(t, 5*time.Second, "the disconnected waiter leaves the queue", func() bool { return e.waiters(t, "x") == 0 })
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/x", tokenHeader(a.Str("token")), "").Status)
	assert.Equal(t, false, e.client.Do(http.MethodGet, "/locks/x", nil, "").JSON()["held"])
}

func TestWaitSurvivesKilledPubSubConnection(t *testing.T) {
	t.Parallel()
	standaloneOnly(t, "kills the pub/sub connections of one Redis server")
	p := newPair(t)
	a := p.hold(t, p.client, "x", "a", 60000)
	b := startWaiter(p.client2, context.Background(), "x", "b", 30000, 30000)
	eventually(t, 5*time.Second, "b queued", func() bool { return p.waiters(t, "x") == 1 })
	killed := p.redis.MustDo(t, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NotEqual(t, "0", killed, "the gateways' subscriptions were killed")
	// rueidis carries commands and the subscription on one connection, so the kill also fails the
	// releasing replica's next call (503); wait until it has reconnected. The waiter's replica is
	// left to recover by itself.
	eventually(t, 5*time.Second, "the releasing replica reconnected", func() bool {
		return p.client.Do(http.MethodGet, "/readyz", nil, "").Status == http.StatusOK
	})
	require.Equal(t, http.StatusOK, p.client.Do(http.MethodDelete, "/locks/x", tokenHeader(a.Str("token")), "").Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
}

func TestHandOffCostIsIndependentOfWaiters(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	a := p.hold(t, p.client, "herd", "a", 60000)
	const n = 200
	results := make(chan *harness.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := p.replica(i)
			r := c.Do(http.MethodPost, "/locks/herd", nil, waitBody("w"+strconv.Itoa(i), 30000, 60000))
			if r.Status == http.StatusCreated {
				// Hand on at once: every grant is one hand-off.
				c.Do(http.MethodDelete, "/locks/herd", tokenHeader(r.Str("token")), "")
			}
			results <- r
		}()
	}
	eventually(t, 20*time.Second, "all queued", func() bool { return p.waiters(t, "herd") == n })
	p.redis.MustDo(t, "CONFIG", "RESETSTAT")
	require.Equal(t, http.StatusOK, p.client.Do(http.MethodDelete, "/locks/herd", tokenHeader(a.Str("token")), "").Status)
	wg.Wait()
	close(results)
	for r := range results {
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	calls, err := p.redis.ScriptCalls()
	require.NoError(t, err)
	perHandOff := float64(calls) / n
	t.Logf("%d script calls for %d hand-offs: %.2f per hand-off", calls, n, perHandOff)
	assert.LessOrEqual(t, perHandOff, 3.0)
}

func TestDeadReplicasWaitersDoNotStrandTheLock(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	a := p.hold(t, p.client, "x", "a", 60000)
	// Three waiters on replica 2, which then dies; one live waiter on replica 1 behind them.
	for i := range 3 {
		go p.client2.Send(context.Background(), http.MethodPost, "/locks/x", nil, waitBody("doomed"+strconv.Itoa(i), 30000, 60000))
		eventually(t, 5*time.Second, "doomed waiter queued", func() bool { return p.waiters(t, "x") == int64(i+1) })
	}
	live := startWaiter(p.client, context.Background(), "x", "live", 30000, 60000)
	eventually(t, 5*time.Second, "live waiter queued", func() bool { return p.waiters(t, "x") == 4 })
	require.NoError(t, p.gw2.Kill())

	start := time.Now()
	require.Equal(t, http.StatusOK, p.client.Do(http.MethodDelete, "/locks/x", tokenHeader(a.Str("token")), "").Status)
	got := <-live
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "live", got.Str("owner"))
	t.Logf("lock reached the live waiter %v after the release (dead replica's entries aged out)", time.Since(start))
}

func TestShutdownEndsWaitsAndKeepsLeases(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	a := p.hold(t, p.client, "x", "a", 60000)
	b := startWaiter(p.client2, context.Background(), "x", "b", 30000, 60000)
	eventually(t, 5*time.Second, "b queued", func() bool { return p.waiters(t, "x") == 1 })
	require.NoError(t, p.gw2.Stop())
	got := <-b
	assert.Equal(t, http.StatusServiceUnavailable, got.Status, "a waiter on a stopping replica is told to retry elsewhere")
	assert.Equal(t, int64(0), p.waiters(t, "x"))
	st := p.client.Do(http.MethodGet, "/locks/x", tokenHeader(a.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"], "the holder keeps its lease")
}
