package sharedlocks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// Semaphores: /semaphores/{name}, across two gateway replicas.

func (w *redissonWorld) semState(name string) *harness.Response {
	return w.clients[0].Do(http.MethodGet, "/semaphores/"+name, nil, "")
}

func (w *redissonWorld) awaitSemWaiters(t *testing.T, name string, n int64) {
	t.Helper()
	harness.Eventually(t, 10*time.Second, fmt.Sprintf("%d waiter(s) for semaphore %q", n, name), func() bool {
		return w.semState(name).Int("waiters") == n
	})
}

func postPermit(c *harness.Client, name, body string) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	go func() { out <- c.Do(http.MethodPost, "/semaphores/"+name, nil, body) }()
	return out
}

func TestSemaphoreTryOnceGrantsExactlyItsPermits(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	const n, permits = 200, 5
	var granted, full atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := w.replica(i).Do(http.MethodPost, "/semaphores/api", nil, testkit.PermitBody(fmt.Sprintf("c%d", i), permits, 60000, 0))
			switch {
			case r.Status == http.StatusCreated:
				granted.Add(1)
			case r.Status == http.StatusConflict && r.Str("type") == "urn:leasegate:problem:semaphore-full":
				full.Add(1)
			default:
				t.Errorf("acquire %d: %d %s", i, r.Status, r.Body)
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int64(permits), granted.Load())
	assert.Equal(t, int64(n-permits), full.Load())
	st := w.semState("api")
	assert.Equal(t, int64(permits), st.Int("permits"))
	assert.Equal(t, int64(permits), st.Int("used"))
	assert.Len(t, st.JSON()["holders"], permits)
}

// TestSemaphoreWaitersNeverExceedItsPermits: 100 waiters on a semaphore of 3, on two replicas,
// each holding briefly: never more than 3 at once, every one granted, fences all distinct.
func TestSemaphoreWaitersNeverExceedItsPermits(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	const n, permits = 100, 3
	var holding, most atomic.Int64
	var mu sync.Mutex
	fences := map[int64]bool{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := w.replica(i)
			r := c.Do(http.MethodPost, "/semaphores/pool", nil, testkit.PermitBody(fmt.Sprintf("w%d", i), permits, 30000, 30000))
			if r.Status != http.StatusCreated {
				t.Errorf("waiter %d: %d %s", i, r.Status, r.Body)
				return
			}
			now := holding.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			mu.Lock()
			if fences[r.Int("fence")] {
				t.Errorf("fence %d granted twice", r.Int("fence"))
			}
			fences[r.Int("fence")] = true
			mu.Unlock()
			holding.Add(-1)
			rel := c.Do(http.MethodDelete, "/semaphores/pool", testkit.TokenHeader(r.Str("token")), "")
			if rel.Status != http.StatusOK {
				t.Errorf("release %d: %d %s", i, rel.Status, rel.Body)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(permits), "never more holders than permits")
	assert.Len(t, fences, n)
	st := w.semState("pool")
	assert.Equal(t, int64(0), st.Int("used"))
	assert.Equal(t, int64(0), st.Int("waiters"))
}

// TestSemaphorePermitExpiryGoesToTheHeadWaiter: a permit whose holder never releases comes back
// when its lease runs out, and goes to the first waiter at once.
func TestSemaphorePermitExpiryGoesToTheHeadWaiter(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	crashed := w.replica(0).Do(http.MethodPost, "/semaphores/one", nil, testkit.PermitBody("crashed", 1, 500, 0))
	require.Equal(t, http.StatusCreated, crashed.Status, "%s", crashed.Body)
	first := postPermit(w.replica(1), "one", testkit.PermitBody("first", 1, 60000, 20000))
	w.awaitSemWaiters(t, "one", 1)
	second := postPermit(w.replica(0), "one", testkit.PermitBody("second", 1, 60000, 20000))
	w.awaitSemWaiters(t, "one", 2)
	start := time.Now()
	r := w.response(t, first, "the first waiter")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	assert.Less(t, time.Since(start), 3*time.Second, "granted when the crashed holder's lease ran out")
	assert.Greater(t, r.Int("fence"), crashed.Int("fence"))
	assert.Equal(t, int64(1), w.semState("one").Int("waiters"), "the second still waits")
	rel := w.replica(0).Do(http.MethodDelete, "/semaphores/one", testkit.TokenHeader(crashed.Str("token")), "")
	assert.Equal(t, http.StatusGone, rel.Status, "the expired permit is gone")
	assert.Equal(t, int64(1), w.semState("one").Int("used"), "and giving it back credits nothing")
	w.replica(1).Do(http.MethodDelete, "/semaphores/one", testkit.TokenHeader(r.Str("token")), "")
	s := w.response(t, second, "the second waiter")
	require.Equal(t, http.StatusCreated, s.Status, "%s", s.Body)
}

func TestSemaphorePermitsMismatch(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	h := w.replica(0).Do(http.MethodPost, "/semaphores/sized", nil, testkit.PermitBody("a", 5, 60000, 0))
	require.Equal(t, http.StatusCreated, h.Status, "%s", h.Body)
	assert.Equal(t, int64(5), h.Int("permits"))
	assert.Equal(t, int64(1), h.Int("used"))
	r := w.replica(1).Do(http.MethodPost, "/semaphores/sized", nil, testkit.PermitBody("b", 3, 60000, 0))
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Equal(t, "urn:leasegate:problem:permits-mismatch", r.Str("type"))
	assert.Equal(t, int64(5), r.Int("permits"))
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, int64(1), w.semState("sized").Int("used"), "nothing changed")
	reenter := w.replica(1).Do(http.MethodPost, "/semaphores/sized", testkit.TokenHeader(h.Str("token")), testkit.PermitBody("a", 3, 60000, 0))
	assert.Equal(t, http.StatusConflict, reenter.Status, "a re-entry naming another size too: %s", reenter.Body)

	w.replica(0).Do(http.MethodDelete, "/semaphores/sized", testkit.TokenHeader(h.Str("token")), "")
	assert.Equal(t, int64(0), w.semState("sized").Int("permits"), "nobody holds or waits: no size")
	r = w.replica(1).Do(http.MethodPost, "/semaphores/sized", nil, testkit.PermitBody("b", 3, 60000, 0))
	require.Equal(t, http.StatusCreated, r.Status, "with nobody holding or waiting, the next acquirer sets the size: %s", r.Body)
	assert.Equal(t, int64(3), r.Int("permits"))
}

func TestSemaphoreReentryKeepsOnePermit(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	h := w.replica(0).Do(http.MethodPost, "/semaphores/re", nil, testkit.PermitBody("a", 2, 60000, 0))
	require.Equal(t, http.StatusCreated, h.Status, "%s", h.Body)
	r := w.replica(1).Do(http.MethodPost, "/semaphores/re", testkit.TokenHeader(h.Str("token")), testkit.PermitBody("a", 2, 60000, 0))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, int64(2), r.Int("holds"))
	assert.Equal(t, int64(1), r.Int("used"), "still one permit")
	assert.Equal(t, h.Int("fence"), r.Int("fence"))
	rel := w.replica(1).Do(http.MethodDelete, "/semaphores/re", testkit.TokenHeader(h.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status)
	assert.Equal(t, false, rel.JSON()["released"])
	rel = w.replica(0).Do(http.MethodDelete, "/semaphores/re", testkit.TokenHeader(h.Str("token")), "")
	assert.Equal(t, true, rel.JSON()["released"])
	assert.Equal(t, int64(0), w.semState("re").Int("used"))
}

// TestLockAndSemaphoreTokensDoNotMix: the same name is a lock and a semaphore apart, and neither's
// token works on the other.
func TestLockAndSemaphoreTokensDoNotMix(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	lock := w.tryLock(t, w.replica(0), "same", "a", 60000)
	sem := w.replica(0).Do(http.MethodPost, "/semaphores/same", nil, testkit.PermitBody("a", 1, 60000, 0))
	require.Equal(t, http.StatusCreated, sem.Status, "a semaphore and a lock of one name are apart: %s", sem.Body)
	for _, tc := range []struct{ path, token string }{
		{"/semaphores/same", lock.Str("token")},
		{"/locks/same", sem.Str("token")},
	} {
		r := w.replica(1).Do(http.MethodDelete, tc.path, testkit.TokenHeader(tc.token), "")
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.path, r.Body)
		assert.Equal(t, "urn:leasegate:problem:invalid-lease-token", r.Str("type"))
		r = w.replica(1).Do(http.MethodPost, tc.path+"/renew", testkit.TokenHeader(tc.token), "")
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s renew: %s", tc.path, r.Body)
	}
	assert.Equal(t, true, w.state("same").JSON()["held"], "nothing changed")
	assert.Equal(t, int64(1), w.semState("same").Int("used"))
}

func TestSemaphoreBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the Redis keyspace")
	w := newRedissonWorld(t)
	for _, body := range []string{
		`{"owner":"a"}`,
		`{"owner":"a","permits":0}`,
		`{"owner":"a","permits":10001}`,
		`{"owner":"a","permits":"5"}`,
		`{"owner":"a","permits":5,"mode":"shared"}`,
	} {
		r := w.replica(0).Do(http.MethodPost, "/semaphores/bad", nil, body)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Body)
		assert.Equal(t, "urn:leasegate:problem:invalid-request", r.Str("type"), body)
	}
	st := w.semState("bad")
	assert.Equal(t, int64(0), st.Int("permits"), "nothing changed")
	assert.Equal(t, int64(0), st.Int("used"))
	assert.Equal(t, "0", w.Redis.MustDo(t, "DBSIZE"), "Redis untouched")
}

func TestSemaphoreWaiterThatLeavesLeavesTheLine(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	h := w.replica(0).Do(http.MethodPost, "/semaphores/lv", nil, testkit.PermitBody("holder", 1, 60000, 0))
	require.Equal(t, http.StatusCreated, h.Status)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.replica(1).Send(ctx, http.MethodPost, "/semaphores/lv", nil, testkit.PermitBody("leaver", 1, 60000, 20000))
	}()
	w.awaitSemWaiters(t, "lv", 1)
	cancel()
	<-done
	w.awaitSemWaiters(t, "lv", 0)
	w.replica(0).Do(http.MethodDelete, "/semaphores/lv", testkit.TokenHeader(h.Str("token")), "")
	assert.Equal(t, int64(0), w.semState("lv").Int("used"), "nobody was granted the permit")
}

// TestSemaphoreWatchdogOutlivesItsReplica: a watchdog permit keeps being renewed after the replica
// that granted it is killed, and its renewal keeps the permit counted.
func TestSemaphoreWatchdogOutlivesItsReplica(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	gwA := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	a := harness.NewClient(t, gwA.URL)
	r := a.Do(http.MethodPost, "/semaphores/wd", nil, `{"owner":"h","permits":1,"ttl_ms":600,"watchdog":true}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	require.NoError(t, gwA.Kill())
	testkit.Throughout(t, 2500*time.Millisecond, "the watchdog permit is still held", func() bool { // four TTLs
		return e.Client.Do(http.MethodGet, "/semaphores/wd", nil, "").Int("used") == 1
	})
	full := e.Client.Do(http.MethodPost, "/semaphores/wd", nil, testkit.PermitBody("other", 1, 60000, 0))
	assert.Equal(t, http.StatusConflict, full.Status)
	rel := e.Client.Do(http.MethodDelete, "/semaphores/wd", testkit.TokenHeader(r.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, int64(0), e.Client.Do(http.MethodGet, "/semaphores/wd", nil, "").Int("used"))
}

// TestSemaphoreRenew: renewing a permit pushes its expiry; a renewal after expiry is 410.
func TestSemaphoreRenew(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	h := w.replica(0).Do(http.MethodPost, "/semaphores/rn", nil, testkit.PermitBody("h", 2, 500, 0))
	require.Equal(t, http.StatusCreated, h.Status)
	r := w.replica(1).Do(http.MethodPost, "/semaphores/rn/renew", testkit.TokenHeader(h.Str("token")), `{"ttl_ms":60000}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, int64(60000), r.Int("ttl_ms"))
	holders := w.semState("rn").JSON()["holders"].([]any)
	require.Len(t, holders, 1)
	left, err := holders[0].(map[string]any)["ttl_ms"].(json.Number).Int64()
	require.NoError(t, err)
	assert.Greater(t, left, int64(50000))

	short := w.replica(0).Do(http.MethodPost, "/semaphores/rn", nil, testkit.PermitBody("s", 2, 300, 0))
	require.Equal(t, http.StatusCreated, short.Status)
	harness.Eventually(t, 5*time.Second, "the short permit's expiry", func() bool { return w.semState("rn").Int("used") == 1 })
	r = w.replica(1).Do(http.MethodPost, "/semaphores/rn/renew", testkit.TokenHeader(short.Str("token")), "")
	assert.Equal(t, http.StatusGone, r.Status, "a permit that ran out is never resurrected")
	assert.Equal(t, int64(1), w.semState("rn").Int("used"))
}

// TestShutdownEndsSharedAndPermitWaits: a replica that stops answers its shared and permit waiters
// 503 shutting-down with a queue ticket; the holders keep their holds.
func TestShutdownEndsSharedAndPermitWaits(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	gwB := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	b := harness.NewClient(t, gwB.URL)
	x := e.Client.Do(http.MethodPost, "/locks/sd", nil, exclusiveBody("writer", 60000, 0))
	require.Equal(t, http.StatusCreated, x.Status)
	p := e.Client.Do(http.MethodPost, "/semaphores/sd", nil, testkit.PermitBody("holder", 1, 60000, 0))
	require.Equal(t, http.StatusCreated, p.Status)
	reader := make(chan *harness.Response, 1)
	go func() { reader <- b.Do(http.MethodPost, "/locks/sd", nil, testkit.SharedBody("reader", 60000, 30000)) }()
	permit := postPermit(b, "sd", testkit.PermitBody("waiter", 1, 60000, 30000))
	harness.Eventually(t, 5*time.Second, "both waiting", func() bool {
		return e.Client.Do(http.MethodGet, "/locks/sd", nil, "").Int("waiters") == 1 &&
			e.Client.Do(http.MethodGet, "/semaphores/sd", nil, "").Int("waiters") == 1
	})
	require.NoError(t, gwB.Stop())
	for _, ch := range []<-chan *harness.Response{reader, permit} {
		r := testkit.Receive(t, ch, 10*time.Second, "a waiter's answer")
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
		assert.Equal(t, "urn:leasegate:problem:shutting-down", r.Str("type"))
		assert.NotEmpty(t, r.Str("queue_ticket"))
	}
	assert.Equal(t, "writer", e.Client.Do(http.MethodGet, "/locks/sd", nil, "").Str("owner"))
	assert.Equal(t, int64(1), e.Client.Do(http.MethodGet, "/semaphores/sd", nil, "").Int("used"))
}

// TestSharedMaxHoldEndsTheWatchdog: the watchdog stops renewing a shared lease max_hold_ms after
// its grant, and the reader's hold then runs out.
func TestSharedMaxHoldEndsTheWatchdog(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r := w.replica(0).Do(http.MethodPost, "/locks/mh", nil, `{"owner":"reader","ttl_ms":300,"mode":"shared","watchdog":true,"max_hold_ms":900}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	start := time.Now()
	harness.Eventually(t, 5*time.Second, "the reader's hold to run out", func() bool {
		return w.state("mh").JSON()["held"] == false
	})
	assert.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "renewed until max_hold_ms")
	p := w.replica(1).Do(http.MethodPost, "/semaphores/mh", nil, `{"owner":"h","permits":1,"ttl_ms":300,"watchdog":true,"max_hold_ms":900}`)
	require.Equal(t, http.StatusCreated, p.Status, "%s", p.Body)
	start = time.Now()
	harness.Eventually(t, 5*time.Second, "the permit to run out", func() bool { return w.semState("mh").Int("used") == 0 })
	assert.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "renewed until max_hold_ms")
}

// TestSharedAndPermitCallsDuringARedisOutage: while Redis is down, shared and permit calls answer
// 503 with Retry-After; they work again once it is back.
func TestSharedAndPermitCallsDuringARedisOutage(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "stops the one Redis")
	e := testkit.NewEnv(t, nil)
	require.NoError(t, e.Redis.Kill())
	for _, req := range []struct{ path, body string }{
		{"/locks/down", testkit.SharedBody("r", 30000, 0)},
		{"/semaphores/down", testkit.PermitBody("p", 2, 30000, 0)},
	} {
		r := e.Client.Do(http.MethodPost, req.path, nil, req.body)
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, req.path)
		assert.Equal(t, "urn:leasegate:problem:backend-unavailable", r.Str("type"))
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
		r = e.Client.Do(http.MethodGet, req.path, nil, "")
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, req.path)
	}
	require.NoError(t, e.Redis.Restart())
	harness.Eventually(t, 10*time.Second, "recovery after the Redis restart", func() bool {
		return e.Client.Do(http.MethodPost, "/locks/down", nil, testkit.SharedBody("r", 30000, 0)).Status == http.StatusCreated
	})
	// Each of the replica's connections finds the restarted Redis on its next call: retry a 503.
	harness.Eventually(t, 10*time.Second, "a permit after the Redis restart", func() bool {
		return e.Client.Do(http.MethodPost, "/semaphores/down", nil, testkit.PermitBody("p", 2, 30000, 0)).Status == http.StatusCreated
	})
}
