package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

func watchdogBody(owner string, ttlMs int64, extra string) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"watchdog":true%s}`, owner, ttlMs, extra)
}

// heldThroughout checks, every 50 ms until d has passed since from, that lock is held with fence.
func heldThroughout(t *testing.T, c *harness.Client, lock string, fence int64, from time.Time, d time.Duration) {
	t.Helper()
	for time.Since(from) < d {
		st := c.Do(http.MethodGet, "/locks/"+lock, nil, "")
		require.Equal(t, true, st.JSON()["held"], "lock %s lost after %v", lock, time.Since(from))
		require.Equal(t, fence, st.Int("fence"), "same lease")
		<-time.After(50 * time.Millisecond)
	}
}

// freeThroughout checks, every 50 ms for d, that lock stays free.
func freeThroughout(t *testing.T, c *harness.Client, lock string, d time.Duration) {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; <-time.After(50 * time.Millisecond) {
		require.Equal(t, false, c.Do(http.MethodGet, "/locks/"+lock, nil, "").JSON()["held"], "resurrected")
	}
}

func TestWatchdogKeepsLeaseAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	start := time.Now()
	r := e.client.Do(http.MethodPost, "/locks/wd", nil, watchdogBody("w1", 1000, ""))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	assert.Equal(t, true, r.JSON()["watchdog"])
	heldThroughout(t, e.client, "wd", r.Int("fence"), start, 3*time.Second)

	st := e.client.Do(http.MethodGet, "/locks/wd", nil, "")
	assert.Equal(t, true, st.JSON()["watchdog"])
	assert.Greater(t, st.Int("max_hold_ms"), int64(3500*1000-5000), "default max hold is LEASEGATE_MAX_HOLD (1 h)")

	// Explicit renew and re-entry work on watchdog leases.
	tok := r.Str("token")
	rn := e.client.Do(http.MethodPost, "/locks/wd/renew", tokenHeader(tok), `{"ttl_ms":1200}`)
	require.Equal(t, http.StatusOK, rn.Status)
	assert.Equal(t, true, rn.JSON()["watchdog"])
	re := e.client.Do(http.MethodPost, "/locks/wd", tokenHeader(tok), acquireBody("w1", 1200))
	require.Equal(t, http.StatusOK, re.Status)
	assert.Equal(t, int64(2), re.Int("holds"))
	assert.Equal(t, true, re.JSON()["watchdog"])
	heldThroughout(t, e.client, "wd", r.Int("fence"), time.Now(), 1500*time.Millisecond)
}

func TestWithoutWatchdogLeaseExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.client.Do(http.MethodPost, "/locks/plain", nil, acquireBody("w1", 1000))
	require.Equal(t, http.StatusCreated, r.Status)
	assert.Equal(t, false, r.JSON()["watchdog"])
	eventually(t, 5*time.Second, "expiry", func() bool {
		return e.client.Do(http.MethodGet, "/locks/plain", nil, "").JSON()["held"] == false
	})
}

func TestWatchdogStopsAtMaxHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	start := time.Now()
	r := e.client.Do(http.MethodPost, "/locks/bounded", nil, watchdogBody("crashy", 500, `,"max_hold_ms":1500`))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	// Renewed well past its 500 ms TTL...
	heldThroughout(t, e.client, "bounded", r.Int("fence"), start, 1200*time.Millisecond)
	// ...but never past max_hold: the last renewal is before 1.5 s, so by 2.0 s it has run out.
	for time.Since(start) < 2300*time.Millisecond {
		<-time.After(10 * time.Millisecond)
	}
	assert.Equal(t, false, e.client.Do(http.MethodGet, "/locks/bounded", nil, "").JSON()["held"])
	freeThroughout(t, e.client, "bounded", 500*time.Millisecond)
}

func TestWatchdogOutlivesItsReplica(t *testing.T) {
	for _, how := range []string{"kill -9", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			others := make([]*harness.Client, 2)
			for i := range others {
				gw := harness.NewGateway(t, e.gatewayOptions(e.gw.KeyPrefix, nil))
				others[i] = harness.NewClient(t, gw.URL)
			}
			r := e.client.Do(http.MethodPost, "/locks/job", nil, watchdogBody("job-1", 1000, ""))
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			if how == "kill -9" {
				require.NoError(t, e.gw.Kill())
			} else {
				require.NoError(t, e.gw.Stop())
			}
			heldThroughout(t, others[0], "job", r.Int("fence"), time.Now(), 4*time.Second)
			rel := others[1].Do(http.MethodDelete, "/locks/job", tokenHeader(r.Str("token")), "")
			require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
			assert.Equal(t, true, rel.JSON()["released"])
			freeThroughout(t, others[0], "job", time.Second)
		})
	}
}

func TestWatchdogSurvivesRedisStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	start := time.Now()
	r := e.client.Do(http.MethodPost, "/locks/stall", nil, watchdogBody("w1", 1500, ""))
	require.Equal(t, http.StatusCreated, r.Status)
	heldThroughout(t, e.client, "stall", r.Int("fence"), start, 700*time.Millisecond)
	e.redis.MustDo(t, "DEBUG", "SLEEP", "0.6")
	heldThroughout(t, e.client, "stall", r.Int("fence"), start, 4*time.Second)
}

func TestReleaseEndsWatchdog(t *testing.T) {
	t.Parallel()
	standaloneOnly(t, "reads the watchdog schedule's key, which Cluster shards")
	e := newEnv(t, nil)
	r := e.client.Do(http.MethodPost, "/locks/done", nil, watchdogBody("w1", 600, ""))
	require.Equal(t, http.StatusCreated, r.Status)
	registry := e.gw.KeyPrefix + "watchdog"
	assert.Equal(t, "1", e.redis.MustDo(t, "ZCARD", registry), "the duty is recorded in Redis")
	heldThroughout(t, e.client, "done", r.Int("fence"), time.Now(), 900*time.Millisecond)

	rel := e.client.Do(http.MethodDelete, "/locks/done", tokenHeader(r.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status)
	assert.Equal(t, "0", e.redis.MustDo(t, "ZCARD", registry), "the duty is dropped at once")
	freeThroughout(t, e.client, "done", time.Second)
	assert.Equal(t, http.StatusGone, e.client.Do(http.MethodPost, "/locks/done/renew", tokenHeader(r.Str("token")), "").Status)
}

func TestWatchdogLeaseGrantedToAWaiter(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	a := p.hold(t, p.client, "handed", "a", 60000)
	b := startWaiterBody(p.client2, "handed", `{"owner":"b","ttl_ms":900,"wait_ms":10000,"watchdog":true,"max_hold_ms":60000}`)
	eventually(t, 5*time.Second, "b queued", func() bool { return p.waiters(t, "handed") == 1 })
	require.Equal(t, http.StatusOK, p.client.Do(http.MethodDelete, "/locks/handed", tokenHeader(a.Str("token")), "").Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, true, got.JSON()["watchdog"])
	heldThroughout(t, p.client, "handed", got.Int("fence"), time.Now(), 2500*time.Millisecond)
}

func TestMaxHoldNeedsWatchdogAndIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]string{"LEASEGATE_MAX_HOLD": "10m"})
	for _, body := range []string{
		`{"owner":"w","max_hold_ms":1000}`,
		`{"owner":"w","watchdog":true,"max_hold_ms":600001}`,
		`{"owner":"w","watchdog":true,"max_hold_ms":0}`,
	} {
		r := e.client.Do(http.MethodPost, "/locks/x", nil, body)
		assert.Equal(t, http.StatusBadRequest, r.Status, body)
		assert.Contains(t, string(r.Body), `"name":"max_hold_ms"`, body)
	}
	r := e.client.Do(http.MethodPost, "/locks/x", nil, watchdogBody("w", 30000, ""))
	require.Equal(t, http.StatusCreated, r.Status)
	left := e.client.Do(http.MethodGet, "/locks/x", nil, "").Int("max_hold_ms")
	assert.LessOrEqual(t, left, int64(600000))
	assert.Greater(t, left, int64(500000))
}

func startWaiterBody(c *harness.Client, lock, body string) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	go func() { out <- c.Do(http.MethodPost, "/locks/"+lock, nil, body) }()
	return out
}

// TestWatchdogFollowsAShortenedTTL renews a 9 s watchdog lease down to 1 s and re-enters another
// down to 900 ms: the watchdog's next renewal must come within the new TTL, not at a third of the
// old one (3 s later, when the lease would long be gone).
func TestWatchdogFollowsAShortenedTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.client.Do(http.MethodPost, "/locks/shrink", nil, watchdogBody("w1", 9000, ""))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	rn := e.client.Do(http.MethodPost, "/locks/shrink/renew", tokenHeader(r.Str("token")), `{"ttl_ms":1000}`)
	require.Equal(t, http.StatusOK, rn.Status, string(rn.Body))

	r2 := e.client.Do(http.MethodPost, "/locks/shrink2", nil, watchdogBody("w2", 9000, ""))
	require.Equal(t, http.StatusCreated, r2.Status, string(r2.Body))
	re := e.client.Do(http.MethodPost, "/locks/shrink2", tokenHeader(r2.Str("token")), acquireBody("w2", 900))
	require.Equal(t, http.StatusOK, re.Status, string(re.Body))

	from := time.Now()
	for time.Since(from) < 3500*time.Millisecond {
		for lock, fence := range map[string]int64{"shrink": r.Int("fence"), "shrink2": r2.Int("fence")} {
			st := e.client.Do(http.MethodGet, "/locks/"+lock, nil, "")
			require.Equal(t, true, st.JSON()["held"], "lock %s lapsed %v after its TTL was shortened", lock, time.Since(from))
			require.Equal(t, fence, st.Int("fence"))
		}
		<-time.After(50 * time.Millisecond)
	}
}
