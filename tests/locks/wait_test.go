package locks

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

func TestWaitWakesOnReleaseAcrossReplicas(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "x", "a", 60000)
	b := testkit.StartWaiter(p.Client2, context.Background(), "x", "b", 30000, 20000)
	harness.Eventually(t, 5*time.Second, "b queued", func() bool { return p.Waiters(t, "x") == 1 })
	assert.Equal(t, int64(1), p.Client2.Do(http.MethodGet, "/locks/x", nil, "").Int("waiters"), "both replicas see the queue")

	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/x", testkit.TokenHeader(a.Str("token")), "").Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "b", got.Str("owner"))
	assert.Greater(t, got.Int("fence"), a.Int("fence"))
	assert.Equal(t, "/locks/x", got.Header.Get("Location"))
	st := p.Client.Do(http.MethodGet, "/locks/x", testkit.TokenHeader(got.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"])
	assert.Greater(t, st.Int("ttl_ms"), int64(20000), "the waiter's own TTL replaced the claim")
	assert.Equal(t, int64(0), st.Int("waiters"))
}

func TestWaitWakesOnExpiry(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "x", "a", 60000)
	b := testkit.StartWaiter(p.Client2, context.Background(), "x", "b", 30000, 30000)
	harness.Eventually(t, 5*time.Second, "b queued", func() bool { return p.Waiters(t, "x") == 1 })
	// The holder shortens its lease and then vanishes: expiry publishes nothing.
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodPost, "/locks/x/renew", testkit.TokenHeader(a.Str("token")), `{"ttl_ms":200}`).Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "b", got.Str("owner"))
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	e.Hold(t, e.Client, "x", "a", 60000)
	r := e.Client.Do(http.MethodPost, "/locks/x", nil, testkit.WaitBody("b", 30000, 200))
	require.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "urn:leasegate:problem:lock-held", r.Str("type"))
	assert.GreaterOrEqual(t, r.Int("waited_ms"), int64(200))
	assert.Greater(t, r.Int("retry_after_ms"), int64(50000))
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, int64(0), e.Waiters(t, "x"), "a timed-out waiter leaves the queue")
}

// TestWaitOverTheMaximumIsCapped: a wait_ms above LEASEGATE_MAX_WAIT is not refused: the lock's,
// the semaphore's and the multi-lock's request each wait the maximum, then answer 409 saying how
// long they waited (Consul's ?wait= caps the same way).
func TestWaitOverTheMaximumIsCapped(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_MAX_WAIT": "300ms"})
	e.Hold(t, e.Client, "capped", "a", 60000)
	require.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/semaphores/capped", nil, testkit.PermitBody("a", 1, 60000, 0)).Status)
	for _, c := range []struct{ what, path, body string }{
		{"lock", "/locks/capped", testkit.WaitBody("b", 30000, 600000)},
		{"semaphore", "/semaphores/capped", testkit.PermitBody("b", 1, 30000, 600000)},
		{"multi-lock", "/multilocks", testkit.MultiBody("b", []string{"capped", "other"}, 30000, 600000, "")},
	} {
		start := time.Now()
		r := e.Client.Do(http.MethodPost, c.path, nil, c.body)
		took := time.Since(start)
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", c.what, r.Body)
		assert.GreaterOrEqual(t, r.Int("waited_ms"), int64(300), "%s: waited the maximum", c.what)
		assert.Less(t, took, 10*time.Second, "%s: not the 600 s asked for", c.what)
	}
	assert.Equal(t, int64(0), e.Waiters(t, "capped"), "the capped waiters left the line")
	r := e.Client.Do(http.MethodPost, "/locks/capped", nil, testkit.WaitBody("b", 30000, -1))
	require.Equal(t, http.StatusBadRequest, r.Status, "a negative wait is still refused")
}

func TestWaitIsFIFOAcrossReplicasWithoutBarging(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "fifo", "holder", 60000)
	const n = 15
	results := make([]<-chan *harness.Response, n)
	for i := range n {
		results[i] = testkit.StartWaiter(p.Replica(i), context.Background(), "fifo", "w"+strconv.Itoa(i), 30000, 30000)
		harness.Eventually(t, 5*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool { return p.Waiters(t, "fifo") == int64(i+1) })
	}
	// No barging: while anyone waits, a try-once fails even when the lock is free for a moment.
	barger := p.Client2.Do(http.MethodPost, "/locks/fifo", nil, testkit.AcquireBody("barger", 1000))
	assert.Equal(t, http.StatusConflict, barger.Status)

	token := a.Str("token")
	for i := range n {
		require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/fifo", testkit.TokenHeader(token), "").Status)
		got := <-results[i]
		require.Equal(t, http.StatusCreated, got.Status, "waiter %d: %s", i, got.Body)
		assert.Equal(t, "w"+strconv.Itoa(i), got.Str("owner"), "grant %d goes to the %d-th arrival", i, i)
		token = got.Str("token")
	}
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/fifo", testkit.TokenHeader(token), "").Status)
	assert.Equal(t, false, p.Client.Do(http.MethodGet, "/locks/fifo", nil, "").JSON()["held"])
}

func TestDisconnectedWaiterIsDequeuedAndNeverHolds(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	a := e.Hold(t, e.Client, "x", "a", 60000)
	ctx, cancel := context.WithCancel(context.Background())
	gone := testkit.StartWaiter(e.Client, ctx, "x", "gone", 30000, 30000)
	harness.Eventually(t, 5*time.Second, "queued", func() bool { return e.Waiters(t, "x") == 1 })
	cancel()
	<-gone
	harness.Eventually(t, 5*time.Second, "the disconnected waiter leaves the queue", func() bool { return e.Waiters(t, "x") == 0 })
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/x", testkit.TokenHeader(a.Str("token")), "").Status)
	assert.Equal(t, false, e.Client.Do(http.MethodGet, "/locks/x", nil, "").JSON()["held"])
}

func TestWaitSurvivesKilledPubSubConnection(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "kills the pub/sub connections of one Redis server")
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "x", "a", 60000)
	b := testkit.StartWaiter(p.Client2, context.Background(), "x", "b", 30000, 30000)
	harness.Eventually(t, 5*time.Second, "b queued", func() bool { return p.Waiters(t, "x") == 1 })
	killed := p.Redis.MustDo(t, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NotEqual(t, "0", killed, "the gateways' subscriptions were killed")
	// rueidis carries commands and the subscription on one connection, so the kill also fails the
	// releasing replica's next call (503); wait until it has reconnected. The waiter's replica is
	// left to recover by itself.
	harness.Eventually(t, 5*time.Second, "the releasing replica reconnected", func() bool {
		return p.Client.Do(http.MethodGet, "/readyz", nil, "").Status == http.StatusOK
	})
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/x", testkit.TokenHeader(a.Str("token")), "").Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
}

func TestHandOffCostIsIndependentOfWaiters(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "herd", "a", 60000)
	const n = 200
	results := make(chan *harness.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := p.Replica(i)
			r := c.Do(http.MethodPost, "/locks/herd", nil, testkit.WaitBody("w"+strconv.Itoa(i), 30000, 60000))
			if r.Status == http.StatusCreated {
				// Hand on at once: every grant is one hand-off.
				c.Do(http.MethodDelete, "/locks/herd", testkit.TokenHeader(r.Str("token")), "")
			}
			results <- r
		}()
	}
	harness.Eventually(t, 20*time.Second, "all queued", func() bool { return p.Waiters(t, "herd") == n })
	p.Redis.MustDo(t, "CONFIG", "RESETSTAT")
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/herd", testkit.TokenHeader(a.Str("token")), "").Status)
	wg.Wait()
	close(results)
	for r := range results {
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	calls, err := p.Redis.ScriptCalls()
	require.NoError(t, err)
	perHandOff := float64(calls) / n
	t.Logf("%d script calls for %d hand-offs: %.2f per hand-off", calls, n, perHandOff)
	assert.LessOrEqual(t, perHandOff, 3.0)
}

func TestDeadReplicasWaitersDoNotStrandTheLock(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "x", "a", 60000)
	// Three waiters on replica 2, which then dies; one live waiter on replica 1 behind them.
	for i := range 3 {
		go p.Client2.Send(context.Background(), http.MethodPost, "/locks/x", nil, testkit.WaitBody("doomed"+strconv.Itoa(i), 30000, 60000))
		harness.Eventually(t, 5*time.Second, "doomed waiter queued", func() bool { return p.Waiters(t, "x") == int64(i+1) })
	}
	live := testkit.StartWaiter(p.Client, context.Background(), "x", "live", 30000, 60000)
	harness.Eventually(t, 5*time.Second, "live waiter queued", func() bool { return p.Waiters(t, "x") == 4 })
	require.NoError(t, p.Gateway2.Kill())

	start := time.Now()
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/x", testkit.TokenHeader(a.Str("token")), "").Status)
	got := <-live
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "live", got.Str("owner"))
	t.Logf("lock reached the live waiter %v after the release (dead replica's entries aged out)", time.Since(start))
}

// TestStarvedReplicasWaiterKeepsItsPlace stops (SIGSTOP) the gateway of the first waiter in line
// for longer than a liveness window, as a gateway starved of CPU would be: its heartbeat does not
// come, and its waiter's liveness deadline passes. A newcomer queues on the other gateway, and the
// lock is released while the first gateway is still stopped, then that gateway goes on (SIGCONT).
// The first waiter must get the lock: its gateway still listens on its grants channel, so it kept
// its place (before, its entry was dropped as dead and the newcomer got the lock).
func TestStarvedReplicasWaiterKeepsItsPlace(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "x", "a", 60000)
	first := testkit.StartWaiter(p.Client2, context.Background(), "x", "starved", 30000, 20000)
	harness.Eventually(t, 5*time.Second, "the first waiter queued", func() bool { return p.Waiters(t, "x") == 1 })
	starved := p.Gateway2.PID()
	require.NoError(t, syscall.Kill(starved, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, syscall.Kill(starved, syscall.SIGCONT))
		}
	}
	t.Cleanup(resume)
	// The stop lasts past the first waiter's liveness deadline (750 ms after its last heartbeat).
	harness.Eventually(t, 5*time.Second, "the first waiter's deadline passed", func() bool { return p.Waiters(t, "x") == 0 })
	newcomer := testkit.StartWaiter(p.Client, context.Background(), "x", "newcomer", 30000, 20000)
	harness.Eventually(t, 5*time.Second, "the newcomer queued", func() bool { return p.Waiters(t, "x") == 1 })
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/x", testkit.TokenHeader(a.Str("token")), "").Status)
	resume()
	got := testkit.Receive(t, first, 10*time.Second, "the first waiter's answer")
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "starved", got.Str("owner"), "the waiter of the starved gateway kept its place")
	select {
	case n := <-newcomer:
		t.Fatalf("the newcomer was answered %d while the first waiter holds the lock: %s", n.Status, n.Body)
	default:
	}
}

func TestShutdownEndsWaitsAndKeepsLeases(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "x", "a", 60000)
	b := testkit.StartWaiter(p.Client2, context.Background(), "x", "b", 30000, 60000)
	harness.Eventually(t, 5*time.Second, "b queued", func() bool { return p.Waiters(t, "x") == 1 })
	require.NoError(t, p.Gateway2.Stop())
	got := <-b
	assert.Equal(t, http.StatusServiceUnavailable, got.Status, "a waiter on a stopping replica is told to retry elsewhere")
	assert.Equal(t, int64(0), p.Waiters(t, "x"))
	st := p.Client.Do(http.MethodGet, "/locks/x", testkit.TokenHeader(a.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"], "the holder keeps its lease")
}
