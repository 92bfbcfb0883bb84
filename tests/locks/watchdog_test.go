package locks

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

func TestWatchdogKeepsLeaseAlive(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	start := time.Now()
	r := e.Client.Do(http.MethodPost, "/locks/wd", nil, testkit.WatchdogBody("w1", 1000, ""))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	assert.Equal(t, true, r.JSON()["watchdog"])
	testkit.HeldThroughout(t, e.Client, "wd", r.Int("fence"), start, 3*time.Second)

	st := e.Client.Do(http.MethodGet, "/locks/wd", nil, "")
	assert.Equal(t, true, st.JSON()["watchdog"])
	assert.Greater(t, st.Int("max_hold_left_ms"), int64(3500*1000-5000), "default max hold is LEASEGATE_MAX_HOLD (1 h)")
	assert.Equal(t, st.Int("max_hold_left_ms"), st.Int("max_hold_ms"), "the deprecated name carries the same number")

	// Explicit renew and re-entry work on watchdog leases.
	tok := r.Str("token")
	rn := e.Client.Do(http.MethodPost, "/locks/wd/renew", testkit.TokenHeader(tok), `{"ttl_ms":1200}`)
	require.Equal(t, http.StatusOK, rn.Status)
	assert.Equal(t, true, rn.JSON()["watchdog"])
	re := e.Client.Do(http.MethodPost, "/locks/wd", testkit.TokenHeader(tok), testkit.AcquireBody("w1", 1200))
	require.Equal(t, http.StatusOK, re.Status)
	assert.Equal(t, int64(2), re.Int("holds"))
	assert.Equal(t, true, re.JSON()["watchdog"])
	testkit.HeldThroughout(t, e.Client, "wd", r.Int("fence"), time.Now(), 1500*time.Millisecond)
}

func TestWithoutWatchdogLeaseExpires(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/plain", nil, testkit.AcquireBody("w1", 1000))
	require.Equal(t, http.StatusCreated, r.Status)
	assert.Equal(t, false, r.JSON()["watchdog"])
	harness.Eventually(t, 5*time.Second, "expiry", func() bool {
		return e.Client.Do(http.MethodGet, "/locks/plain", nil, "").JSON()["held"] == false
	})
}

func TestWatchdogStopsAtMaxHold(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	start := time.Now()
	r := e.Client.Do(http.MethodPost, "/locks/bounded", nil, testkit.WatchdogBody("crashy", 500, `,"max_hold_ms":1500`))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	// Renewed well past its 500 ms TTL...
	testkit.HeldThroughout(t, e.Client, "bounded", r.Int("fence"), start, 1200*time.Millisecond)
	// ...but never past max_hold: the last renewal is before 1.5 s, so by 2.0 s it has run out.
	for time.Since(start) < 2300*time.Millisecond {
		<-time.After(10 * time.Millisecond)
	}
	assert.Equal(t, false, e.Client.Do(http.MethodGet, "/locks/bounded", nil, "").JSON()["held"])
	testkit.FreeThroughout(t, e.Client, "bounded", 500*time.Millisecond)
}

// TestWatchdogOutlivesItsReplica: a watchdog lease whose replica is killed or stopped is renewed by
// the others. Its TTL is 3 s: a renewal the dead replica had claimed is retried by another only
// after the claim's hold (250 ms) and a sweep (100 ms), which a 1 s TTL left about 300 ms for on a
// loaded machine (see TestMultiLockWatchdogOutlivesItsReplica for 2 s).
func TestWatchdogOutlivesItsReplica(t *testing.T) {
	for _, how := range []string{"kill -9", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := testkit.NewEnv(t, nil)
			others := make([]*harness.Client, 2)
			for i := range others {
				gw := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
				others[i] = harness.NewClient(t, gw.URL)
			}
			r := e.Client.Do(http.MethodPost, "/locks/job", nil, testkit.WatchdogBody("job-1", 3000, ""))
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			if how == "kill -9" {
				require.NoError(t, e.Gateway.Kill())
			} else {
				require.NoError(t, e.Gateway.Stop())
			}
			testkit.HeldThroughout(t, others[0], "job", r.Int("fence"), time.Now(), 9*time.Second)
			rel := others[1].Do(http.MethodDelete, "/locks/job", testkit.TokenHeader(r.Str("token")), "")
			require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
			assert.Equal(t, true, rel.JSON()["released"])
			testkit.FreeThroughout(t, others[0], "job", time.Second)
		})
	}
}

// TestWatchdogSurvivesRedisStall: Redis stops answering for longer than the watchdog's renewal
// interval, so a renewal falls due while it sleeps; the lease lives on, renewed once Redis answers.
//
// The proportions are what make it hold on a loaded machine: renewals come every third of the TTL,
// so in the worst case the stall begins as one falls due and the lease has 2/3 TTL - stall left to
// be renewed in once Redis answers (a sweep, a claim and the renewal's script, on a busy machine).
// A 1.5 s TTL and a 0.6 s stall left 400 ms, which a loaded machine missed; 4.8 s and 1.7 s leave
// 1.5 s. The stall stays well under the gateway's Redis read timeout (3 s), past which its
// connections would be dropped: a different test.
func TestWatchdogSurvivesRedisStall(t *testing.T) {
	t.Parallel()
	const ttl, stall = 4800 * time.Millisecond, 1700 * time.Millisecond
	require.Greater(t, stall, ttl/3, "a renewal must fall due during the stall")
	e := testkit.NewEnv(t, nil)
	start := time.Now()
	r := e.Client.Do(http.MethodPost, "/locks/stall", nil, testkit.WatchdogBody("w1", ttl.Milliseconds(), ""))
	require.Equal(t, http.StatusCreated, r.Status)
	// Past the first renewal, so the stall meets a watchdog that is running.
	testkit.HeldThroughout(t, e.Client, "stall", r.Int("fence"), start, ttl/3+400*time.Millisecond)
	stalled := time.Now()
	e.Redis.MustDo(t, "DEBUG", "SLEEP", strconv.FormatFloat(stall.Seconds(), 'f', -1, 64))
	woke := time.Now()
	// A lease last renewed before the stall began would be gone a TTL after that at the latest:
	// held a TTL and more after the stall ended, it was renewed after it.
	testkit.HeldThroughout(t, e.Client, "stall", r.Int("fence"), woke, ttl+time.Second)
	t.Logf("held through a %v stall that began %v after the request (TTL %v)", woke.Sub(stalled).Round(time.Millisecond),
		stalled.Sub(start).Round(time.Millisecond), ttl)
}

// TestReleaseEndsWatchdog: a release takes the lease off the watchdog's schedule at once, and no
// renewal brings it back. Its TTL is 2 s: a grant that takes more than half its TTL to come back is
// answered 503 (docs/api.md, "A grant is answered fresh"), and a 600 ms lease's grant has taken 320 ms
// on a loaded machine.
func TestReleaseEndsWatchdog(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the watchdog schedule's key, which Cluster shards")
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/done", nil, testkit.WatchdogBody("w1", 2000, ""))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	registry := e.Gateway.KeyPrefix + "watchdog"
	assert.Equal(t, "1", e.Redis.MustDo(t, "ZCARD", registry), "the duty is recorded in Redis")
	testkit.HeldThroughout(t, e.Client, "done", r.Int("fence"), time.Now(), 3*time.Second) // renewed past its TTL

	rel := e.Client.Do(http.MethodDelete, "/locks/done", testkit.TokenHeader(r.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status)
	assert.Equal(t, "0", e.Redis.MustDo(t, "ZCARD", registry), "the duty is dropped at once")
	testkit.FreeThroughout(t, e.Client, "done", time.Second)
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/done/renew", testkit.TokenHeader(r.Str("token")), "").Status)
}

func TestWatchdogLeaseGrantedToAWaiter(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "handed", "a", 60000)
	b := testkit.StartWaiterBody(p.Client2, "handed", `{"owner":"b","ttl_ms":900,"wait_ms":10000,"watchdog":true,"max_hold_ms":60000}`)
	harness.Eventually(t, 5*time.Second, "b queued", func() bool { return p.Waiters(t, "handed") == 1 })
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/handed", testkit.TokenHeader(a.Str("token")), "").Status)
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, true, got.JSON()["watchdog"])
	testkit.HeldThroughout(t, p.Client, "handed", got.Int("fence"), time.Now(), 2500*time.Millisecond)
}

func TestMaxHoldNeedsWatchdogAndIsCapped(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_MAX_HOLD": "10m"})
	for _, body := range []string{
		`{"owner":"w","max_hold_ms":1000}`,
		`{"owner":"w","watchdog":true,"max_hold_ms":600001}`,
		`{"owner":"w","watchdog":true,"max_hold_ms":0}`,
	} {
		r := e.Client.Do(http.MethodPost, "/locks/x", nil, body)
		assert.Equal(t, http.StatusBadRequest, r.Status, body)
		assert.Contains(t, string(r.Body), `"name":"max_hold_ms"`, body)
	}
	r := e.Client.Do(http.MethodPost, "/locks/x", nil, testkit.WatchdogBody("w", 30000, ""))
	require.Equal(t, http.StatusCreated, r.Status)
	left := e.Client.Do(http.MethodGet, "/locks/x", nil, "").Int("max_hold_left_ms")
	assert.LessOrEqual(t, left, int64(600000))
	assert.Greater(t, left, int64(500000))
}

// TestWatchdogFollowsAShortenedTTL renews a 9 s watchdog lease down to 1 s and re-enters another
// down to 900 ms: the watchdog's next renewal must come within the new TTL, not at a third of the
// old one (3 s later, when the lease would long be gone).
func TestWatchdogFollowsAShortenedTTL(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/shrink", nil, testkit.WatchdogBody("w1", 9000, ""))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	rn := e.Client.Do(http.MethodPost, "/locks/shrink/renew", testkit.TokenHeader(r.Str("token")), `{"ttl_ms":1000}`)
	require.Equal(t, http.StatusOK, rn.Status, string(rn.Body))

	r2 := e.Client.Do(http.MethodPost, "/locks/shrink2", nil, testkit.WatchdogBody("w2", 9000, ""))
	require.Equal(t, http.StatusCreated, r2.Status, string(r2.Body))
	re := e.Client.Do(http.MethodPost, "/locks/shrink2", testkit.TokenHeader(r2.Str("token")), testkit.AcquireBody("w2", 900))
	require.Equal(t, http.StatusOK, re.Status, string(re.Body))

	from := time.Now()
	for time.Since(from) < 3500*time.Millisecond {
		for lock, fence := range map[string]int64{"shrink": r.Int("fence"), "shrink2": r2.Int("fence")} {
			st := e.Client.Do(http.MethodGet, "/locks/"+lock, nil, "")
			require.Equal(t, true, st.JSON()["held"], "lock %s lapsed %v after its TTL was shortened", lock, time.Since(from))
			require.Equal(t, fence, st.Int("fence"))
		}
		<-time.After(50 * time.Millisecond)
	}
}
