package operations

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// delta is what each series moved by between two scrapes.
func delta(before, after map[string]float64, series string) float64 {
	return after[series] - before[series]
}

// TestMetricsCountAScriptedSequence runs a known sequence of calls and checks the exact counter
// deltas it must produce.
func TestMetricsCountAScriptedSequence(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	before := testkit.Scrape(t, e.Gateway.URL)

	a := e.Client.Do(http.MethodPost, "/locks/m.a", nil, testkit.AcquireBody("w1", 30000))
	require.Equal(t, http.StatusCreated, a.Status)
	require.Equal(t, http.StatusConflict, e.Client.Do(http.MethodPost, "/locks/m.a", nil, testkit.AcquireBody("w2", 30000)).Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodPost, "/locks/m.a", testkit.TokenHeader(a.Str("token")), testkit.AcquireBody("w1", 30000)).Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/m.a", testkit.TokenHeader(a.Str("token")), "").Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/m.a", testkit.TokenHeader(a.Str("token")), "").Status)
	require.Equal(t, http.StatusGone, e.Client.Do(http.MethodDelete, "/locks/m.a", testkit.TokenHeader(a.Str("token")), "").Status)

	b := e.Client.Do(http.MethodPost, "/locks/m.b", nil, testkit.AcquireBody("w1", 30000))
	require.Equal(t, http.StatusCreated, b.Status)
	waiter := testkit.StartWaiterBody(e.Client, "m.b", testkit.WaitBody("w3", 30000, 10000))
	harness.Eventually(t, 5*time.Second, "the waiter queued", func() bool { return e.Waiters(t, "m.b") == 1 })
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/m.b", testkit.TokenHeader(b.Str("token")), "").Status)
	w := <-waiter
	require.Equal(t, http.StatusCreated, w.Status, string(w.Body))
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/m.b", testkit.TokenHeader(w.Str("token")), "").Status)
	require.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/locks/m.c", nil, testkit.AcquireBody("w4", 30000)).Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/m.c?force=true", nil, "").Status)

	after := testkit.Scrape(t, e.Gateway.URL)
	lock := `{how="new",kind="lock",mode="exclusive"}`
	for series, want := range map[string]float64{
		`leasegate_grants_total` + lock:                                                        3,
		`leasegate_grants_total{how="reentry",kind="lock",mode="exclusive"}`:                   1,
		`leasegate_grants_total{how="handoff",kind="lock",mode="exclusive"}`:                   1,
		`leasegate_releases_total{kind="lock",mode="exclusive"}`:                               3,
		`leasegate_hold_seconds_count{kind="lock",mode="exclusive"}`:                           3,
		`leasegate_conflicts_total{kind="lock"}`:                                               1,
		`leasegate_lost_total{kind="lock"}`:                                                    1,
		`leasegate_waits_started_total{kind="lock"}`:                                           1,
		`leasegate_waits_ended_total{kind="lock",outcome="granted"}`:                           1,
		`leasegate_wait_seconds_count{kind="lock"}`:                                            1,
		`leasegate_http_requests_total{method="POST",route="/locks/{name}",status="201"}`:      4,
		`leasegate_http_requests_total{method="POST",route="/locks/{name}",status="409"}`:      1,
		`leasegate_http_requests_total{method="DELETE",route="/locks/{name}",status="410"}`:    1,
		`leasegate_http_request_duration_seconds_count{method="DELETE",route="/locks/{name}"}`: 6,
		`leasegate_redis_script_calls_total{outcome="ok",script="release"}`:                    5,
		`leasegate_redis_script_duration_seconds_count{script="release"}`:                      5,
		`leasegate_redis_script_calls_total{outcome="error",script="release"}`:                 0,
		`leasegate_watchdog_renewals_total{outcome="error"}`:                                   0,
		`leasegate_forced_releases_total{kind="lock"}`:                                         1,
		`leasegate_redis_script_calls_total{outcome="ok",script="force"}`:                      1,
		// the 410's look-up of a force release's mark, and on that path only
		`leasegate_redis_script_calls_total{outcome="ok",script="forced"}`: 1,
		`leasegate_redis_errors_total`:                                     0,
	} {
		assert.Equal(t, want, delta(before, after, series), series)
	}
	assert.Equal(t, 0.0, after["leasegate_parked_requests"])
	assert.Equal(t, 600.0, after["leasegate_long_hold_threshold_seconds"])
	assert.Contains(t, after, "go_goroutines")
	assert.Contains(t, after, "process_resident_memory_bytes")
	for series := range after {
		assert.NotContains(t, series, "m.a", "no lock name is a label")
	}
}

// TestLongHoldGaugeAndLog holds a watchdog lease, a long-TTL lease and a lease re-entered with a
// long TTL past a short LEASEGATE_LONG_HOLD: the gauge turns on (and off after the releases), the
// oldest age grows, and each long hold is logged once.
func TestLongHoldGaugeAndLog(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_LONG_HOLD": "1s"})
	short := e.Client.Do(http.MethodPost, "/locks/lh.short", nil, testkit.AcquireBody("brief", 30000))
	require.Equal(t, http.StatusCreated, short.Status)
	wd := e.Client.Do(http.MethodPost, "/locks/lh.watchdog", nil, testkit.WatchdogBody("hung-worker", 900, ""))
	require.Equal(t, http.StatusCreated, wd.Status, string(wd.Body))
	long := e.Client.Do(http.MethodPost, "/locks/lh.ttl", nil, testkit.AcquireBody("slow-job", 60000))
	require.Equal(t, http.StatusCreated, long.Status)
	// Granted short, then re-entered with a long TTL: the re-entry makes it one that may outlive
	// the threshold.
	re := e.Client.Do(http.MethodPost, "/locks/lh.reentered", nil, testkit.AcquireBody("re-entrant", 900))
	require.Equal(t, http.StatusCreated, re.Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodPost, "/locks/lh.reentered", testkit.TokenHeader(re.Str("token")), testkit.AcquireBody("re-entrant", 60000)).Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/lh.short", testkit.TokenHeader(short.Str("token")), "").Status)

	harness.Eventually(t, 10*time.Second, "three long holds counted", func() bool {
		m := testkit.Scrape(t, e.Gateway.URL)
		return m["leasegate_long_holds"] == 3 && m["leasegate_oldest_hold_seconds"] >= 1 && m["leasegate_redis_up"] == 1
	})
	top := e.Client.Do(http.MethodGet, "/admin/top", nil, "")
	require.Equal(t, http.StatusOK, top.Status)
	held := top.JSON()["longest_held"].([]any)
	var owners []string
	for _, h := range held {
		owners = append(owners, h.(map[string]any)["owner"].(string))
	}
	assert.ElementsMatch(t, []string{"hung-worker", "slow-job", "re-entrant"}, owners, string(top.Body))

	harness.Eventually(t, 10*time.Second, "one log line per long hold", func() bool {
		return strings.Count(e.Gateway.Logs(), "lock held longer than LEASEGATE_LONG_HOLD") == 3
	})
	logs := e.Gateway.Logs()
	assert.Contains(t, logs, `"lock":"lh.watchdog","owner":"hung-worker"`)
	assert.Contains(t, logs, `"lock":"lh.ttl","owner":"slow-job"`)
	assert.NotContains(t, logs, "lh.short")
	assert.NotContains(t, logs, `"multilock":""`, "a lock's line names no multi-lock")

	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/lh.watchdog", testkit.TokenHeader(wd.Str("token")), "").Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/lh.ttl", testkit.TokenHeader(long.Str("token")), "").Status)
	for range 2 {
		require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/lh.reentered", testkit.TokenHeader(re.Str("token")), "").Status)
	}
	harness.Eventually(t, 10*time.Second, "no long holds after the releases", func() bool {
		m := testkit.Scrape(t, e.Gateway.URL)
		return m["leasegate_long_holds"] == 0 && m["leasegate_oldest_hold_seconds"] == 0
	})
	// Logged once each, however many sweeps saw them.
	assert.Equal(t, 3, strings.Count(e.Gateway.Logs(), "lock held longer than LEASEGATE_LONG_HOLD"))
}

// TestWatchdogLeasesAreLongHoldCandidatesOnlyOnceTheyMayBeOne: a watchdog lease that cannot live
// past LEASEGATE_LONG_HOLD (10 min by default) before its next renewal is not among the report's
// candidates (the holds:aged zset), whose entry would cost Redis ~160 B for the lease's life; the
// renewal after which it may is what enters it (TestLongHoldGaugeAndLog sees it reported).
func TestWatchdogLeasesAreLongHoldCandidatesOnlyOnceTheyMayBeOne(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the one server's holds:aged zset")
	e := testkit.NewEnv(t, nil)
	wd := e.Client.Do(http.MethodPost, "/locks/lhc.watchdog", nil, testkit.WatchdogBody("worker", 3000, ""))
	require.Equal(t, http.StatusCreated, wd.Status, string(wd.Body))
	aged := e.Gateway.KeyPrefix + "holds:aged"
	assert.Equal(t, "0", e.Redis.MustDo(t, "ZCARD", aged), "enrolled")
	harness.Eventually(t, 10*time.Second, "two renewals", func() bool {
		return testkit.Scrape(t, e.Gateway.URL)[`leasegate_watchdog_renewals_total{outcome="renewed"}`] >= 2
	})
	assert.Equal(t, "0", e.Redis.MustDo(t, "ZCARD", aged), "renewed")
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/lhc.watchdog", testkit.TokenHeader(wd.Str("token")), "").Status)
}
