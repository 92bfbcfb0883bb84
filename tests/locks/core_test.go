package locks

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

func TestConcurrentTryOnceHasOneWinner(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	const n = 200
	statuses := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses[i] = e.Client.Do(http.MethodPost, "/locks/contended", nil, testkit.AcquireBody(fmt.Sprintf("w%d", i), 30000)).Status
		}()
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	assert.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: n - 1}, count)
}

func TestReentryCounting(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/re", nil, testkit.AcquireBody("w1", 30000))
	require.Equal(t, http.StatusCreated, r.Status)
	assert.Equal(t, "/locks/re", r.Header.Get("Location"))
	tok, fence := r.Str("token"), r.Int("fence")

	for holds := int64(2); holds <= 3; holds++ {
		r := e.Client.Do(http.MethodPost, "/locks/re", testkit.TokenHeader(tok), testkit.AcquireBody("w1", 20000))
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		assert.Equal(t, holds, r.Int("holds"))
		assert.Equal(t, fence, r.Int("fence"), "re-entry keeps the fence")
		assert.Equal(t, tok, r.Str("token"))
		assert.Equal(t, int64(20000), r.Int("ttl_ms"))
	}
	st := e.Client.Do(http.MethodGet, "/locks/re", testkit.TokenHeader(tok), "")
	assert.Equal(t, int64(3), st.Int("holds"))
	assert.Equal(t, true, st.JSON()["yours"])
	assert.LessOrEqual(t, st.Int("ttl_ms"), int64(20000), "re-entry reset the TTL")

	for remaining := int64(2); remaining >= 0; remaining-- {
		r := e.Client.Do(http.MethodDelete, "/locks/re", testkit.TokenHeader(tok), "")
		require.Equal(t, http.StatusOK, r.Status)
		assert.Equal(t, remaining, r.Int("holds"))
		assert.Equal(t, remaining == 0, r.JSON()["released"])
		held := e.Client.Do(http.MethodGet, "/locks/re", nil, "").JSON()["held"]
		assert.Equal(t, remaining > 0, held)
	}
	r = e.Client.Do(http.MethodDelete, "/locks/re", testkit.TokenHeader(tok), "")
	assert.Equal(t, http.StatusGone, r.Status)
	assert.Equal(t, "urn:leasegate:problem:lease-gone", r.Str("type"))
	r = e.Client.Do(http.MethodPost, "/locks/re", testkit.TokenHeader(tok), testkit.AcquireBody("w1", 20000))
	assert.Equal(t, http.StatusGone, r.Status, "re-entering a released lease does not grant a new one")
}

func TestOtherLeaseCannotRelease(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	a := e.Client.Do(http.MethodPost, "/locks/mine", nil, testkit.AcquireBody("a", 30000))
	require.Equal(t, http.StatusCreated, a.Status)
	a2 := e.Client.Do(http.MethodDelete, "/locks/mine", testkit.TokenHeader(a.Str("token")), "")
	require.Equal(t, http.StatusOK, a2.Status)
	b := e.Client.Do(http.MethodPost, "/locks/mine", nil, testkit.AcquireBody("b", 30000))
	require.Equal(t, http.StatusCreated, b.Status)

	// a's token is genuine but its lease is over: it must not release b's.
	r := e.Client.Do(http.MethodDelete, "/locks/mine", testkit.TokenHeader(a.Str("token")), "")
	assert.Equal(t, http.StatusGone, r.Status)
	r = e.Client.Do(http.MethodPost, "/locks/mine/renew", testkit.TokenHeader(a.Str("token")), "")
	assert.Equal(t, http.StatusGone, r.Status)
	st := e.Client.Do(http.MethodGet, "/locks/mine", testkit.TokenHeader(a.Str("token")), "")
	assert.Equal(t, "b", st.Str("owner"))
	assert.Equal(t, false, st.JSON()["yours"])
}

func TestExpiryFreesLockAndStaleTokenIsGone(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the lock's key on the Redis")
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/exp", nil, testkit.AcquireBody("w1", 100))
	require.Equal(t, http.StatusCreated, r.Status)
	tok := r.Str("token")
	harness.Eventually(t, 5*time.Second, "lease expiry", func() bool {
		return e.Client.Do(http.MethodGet, "/locks/exp", nil, "").JSON()["held"] == false
	})
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/exp/renew", testkit.TokenHeader(tok), "").Status, "renew never resurrects")
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodDelete, "/locks/exp", testkit.TokenHeader(tok), "").Status)
	assert.Equal(t, "0", e.Redis.MustDo(t, "EXISTS", e.Gateway.KeyPrefix+"{exp}"), "nothing resurrected in Redis")
	assert.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/locks/exp", nil, testkit.AcquireBody("w2", 30000)).Status)
}

func TestRenewExtends(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the lock's TTL on the Redis")
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/rn", nil, testkit.AcquireBody("w1", 2000))
	require.Equal(t, http.StatusCreated, r.Status)
	tok := r.Str("token")

	rn := e.Client.Do(http.MethodPost, "/locks/rn/renew", testkit.TokenHeader(tok), `{"ttl_ms":60000}`)
	require.Equal(t, http.StatusOK, rn.Status, string(rn.Body))
	assert.Equal(t, int64(60000), rn.Int("ttl_ms"))
	assert.Equal(t, r.Int("fence"), rn.Int("fence"))
	assert.Greater(t, rn.Str("expires_at"), r.Str("expires_at"))
	pttl := e.Redis.MustDo(t, "PTTL", e.Gateway.KeyPrefix+"{rn}")
	assert.Greater(t, testkit.Atoi(t, pttl), int64(50000))

	// Without a body, renew uses the lease's TTL, which is now 60 s.
	rn = e.Client.Do(http.MethodPost, "/locks/rn/renew", testkit.TokenHeader(tok), "")
	require.Equal(t, http.StatusOK, rn.Status)
	assert.Equal(t, int64(60000), rn.Int("ttl_ms"))
}

func TestFencesStrictlyIncrease(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "deletes the fence floor on the Redis")
	e := testkit.NewEnv(t, nil)
	var last int64
	grant := func(i int, ttlMs int64) string {
		t.Helper()
		var r *harness.Response
		harness.Eventually(t, 5*time.Second, "a free lock", func() bool {
			r = e.Client.Do(http.MethodPost, "/locks/fenced", nil, testkit.AcquireBody(fmt.Sprintf("w%d", i), ttlMs))
			return r.Status == http.StatusCreated
		})
		f := r.Int("fence")
		require.Greater(t, f, last, "grant %d", i)
		last = f
		return r.Str("token")
	}
	for i := range 1000 {
		switch {
		case i%10 == 3: // let it expire; the next grant waits for that
			grant(i, 1)
		case i == 500: // restart the gateway: fences live in Redis, not in the process
			tok := grant(i, 30000)
			require.NoError(t, e.Gateway.Stop())
			e.Gateway = harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
			e.Client = harness.NewClient(t, e.Gateway.URL)
			require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/fenced", testkit.TokenHeader(tok), "").Status)
		case i == 700: // lose the fence floor, as a Redis data loss would: the time floor still rises
			tok := grant(i, 30000)
			e.Redis.MustDo(t, "DEL", e.Gateway.KeyPrefix+"fence")
			require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/fenced", testkit.TokenHeader(tok), "").Status)
		default:
			tok := grant(i, 30000)
			require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/fenced", testkit.TokenHeader(tok), "").Status)
		}
	}
}

func TestRedisRestartGives503ThenRecovers(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "restarts the one Redis (Sentinel and Cluster failovers have tests of their own)")
	e := testkit.NewEnv(t, nil)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodGet, "/readyz", nil, "").Status)
	require.NoError(t, e.Redis.Kill())

	for _, req := range []struct{ method, path, body string }{
		{http.MethodPost, "/locks/down", testkit.AcquireBody("w1", 30000)},
		{http.MethodGet, "/locks/down", ""},
		{http.MethodGet, "/readyz", ""},
	} {
		r := e.Client.Do(req.method, req.path, nil, req.body)
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, req.path)
		assert.Equal(t, "urn:leasegate:problem:backend-unavailable", r.Str("type"))
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
	}
	assert.Equal(t, http.StatusOK, e.Client.Do(http.MethodGet, "/healthz", nil, "").Status, "liveness does not depend on Redis")

	require.NoError(t, e.Redis.Restart())
	harness.Eventually(t, 10*time.Second, "recovery after the Redis restart", func() bool {
		return e.Client.Do(http.MethodPost, "/locks/down", nil, testkit.AcquireBody("w1", 30000)).Status == http.StatusCreated
	})
	assert.Equal(t, http.StatusOK, e.Client.Do(http.MethodGet, "/readyz", nil, "").Status)
}

func TestGatewayStartsWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	r := harness.NewRedis(t, harness.RedisOptions{})
	require.NoError(t, r.Kill())
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: r})
	c := harness.NewClient(t, gw.URL)
	assert.Equal(t, http.StatusServiceUnavailable, c.Do(http.MethodGet, "/readyz", nil, "").Status)
	assert.Equal(t, http.StatusServiceUnavailable, c.Do(http.MethodPost, "/locks/x", nil, testkit.AcquireBody("w", 1000)).Status)
	require.NoError(t, r.Restart())
	harness.Eventually(t, 10*time.Second, "readiness once Redis is up", func() bool {
		return c.Do(http.MethodGet, "/readyz", nil, "").Status == http.StatusOK
	})
	assert.Equal(t, http.StatusCreated, c.Do(http.MethodPost, "/locks/x", nil, testkit.AcquireBody("w", 1000)).Status)
}

func TestShutdownKeepsLeases(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the lock's key on the Redis")
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/keep", nil, testkit.AcquireBody("w1", 60000))
	require.Equal(t, http.StatusCreated, r.Status)
	require.NoError(t, e.Gateway.Stop(), "SIGTERM exits cleanly")
	assert.Contains(t, e.Gateway.Logs(), `"msg":"stopped"`)
	assert.Equal(t, "1", e.Redis.MustDo(t, "EXISTS", e.Gateway.KeyPrefix+"{keep}"), "shutdown releases nobody's lease")

	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	c2 := harness.NewClient(t, gw2.URL)
	rel := c2.Do(http.MethodDelete, "/locks/keep", testkit.TokenHeader(r.Str("token")), "")
	assert.Equal(t, http.StatusOK, rel.Status, "another replica with the same secret accepts the token")
}

func TestHealthAndSpec(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	assert.Equal(t, http.StatusOK, e.Client.Do(http.MethodGet, "/healthz", nil, "").Status)
	assert.Equal(t, http.StatusOK, e.Client.Do(http.MethodGet, "/readyz", nil, "").Status)
	spec := e.Client.Do(http.MethodGet, "/openapi.yaml", nil, "")
	assert.Equal(t, http.StatusOK, spec.Status)
	assert.True(t, strings.HasPrefix(string(spec.Body), "openapi: 3."), "serves the spec")
}

func TestLogsNeverContainTokens(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_ACCESS_LOG": "all"}) // every request logged: none may carry a token
	r := e.Client.Do(http.MethodPost, "/locks/quiet", nil, testkit.AcquireBody("w1", 30000))
	require.Equal(t, http.StatusCreated, r.Status)
	e.Client.Do(http.MethodDelete, "/locks/quiet", testkit.TokenHeader(r.Str("token")), "")
	logs := e.Gateway.Logs()
	assert.NotContains(t, logs, r.Str("token"))
	assert.NotContains(t, logs, strings.SplitN(r.Str("token"), ".", 2)[1])
	assert.NotContains(t, logs, harness.TestTokenSecret)
	assert.Contains(t, logs, `"path":"/locks/quiet","status":201`)
}
