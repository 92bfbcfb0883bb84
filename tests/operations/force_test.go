package operations

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
	"github.com/leasegate/leasegate/internal/testkit"
)

func TestForceReleaseHandsTheLockToTheFirstWaiter(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	a := e.Client.Do(http.MethodPost, "/locks/f", nil, testkit.WatchdogBody("a", 600, ""))
	require.Equal(t, http.StatusCreated, a.Status, string(a.Body))
	tok := a.Str("token")
	re := e.Client.Do(http.MethodPost, "/locks/f", testkit.TokenHeader(tok), testkit.WatchdogBody("a", 600, ""))
	require.Equal(t, http.StatusOK, re.Status, string(re.Body))
	require.Equal(t, int64(2), re.Int("holds"))

	b := testkit.StartWaiter(e.Client, context.Background(), "f", "b", 30000, 20000)
	harness.Eventually(t, 5*time.Second, "b queued", func() bool { return e.Waiters(t, "f") == 1 })
	c := testkit.StartWaiter(e.Client, context.Background(), "f", "c", 30000, 20000)
	harness.Eventually(t, 5*time.Second, "c queued", func() bool { return e.Waiters(t, "f") == 2 })

	f := e.Client.Do(http.MethodDelete, "/locks/f?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	assert.JSONEq(t, fmt.Sprintf(`{"lock":"f","released":true,"forced":true,"holds_removed":1,
		"removed":[{"owner":"a","fence":%d,"mode":"exclusive"}]}`, a.Int("fence")), string(f.Body), "the answer lists the hold removed")

	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, "the first waiter gets the lock: %s", got.Body)
	assert.Equal(t, "b", got.Str("owner"))
	assert.Greater(t, got.Int("fence"), a.Int("fence"))
	st := e.Client.Do(http.MethodGet, "/locks/f", nil, "")
	assert.Equal(t, "b", st.Str("owner"))
	assert.Equal(t, int64(1), st.Int("waiters"), "c still waits, behind b")

	// Every old token of the lock is gone: renew, release, re-entry, inspect.
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/f/renew", testkit.TokenHeader(tok), "").Status)
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodDelete, "/locks/f", testkit.TokenHeader(tok), "").Status)
	r := e.Client.Do(http.MethodPost, "/locks/f", testkit.TokenHeader(tok), testkit.AcquireBody("a", 30000))
	assert.Equal(t, http.StatusGone, r.Status, "re-entry with the old token: %s", r.Body)
	assert.Equal(t, "urn:leasegate:problem:lease-gone", r.Str("type"))
	assert.Equal(t, false, e.Client.Do(http.MethodGet, "/locks/f", testkit.TokenHeader(tok), "").JSON()["yours"])

	// The audit line names who forced it and what was removed.
	logs := e.Gateway.Logs()
	assert.Contains(t, logs, `"msg":"lock force-released","lock":"f"`)
	assert.Contains(t, logs, `"remote_addr":"127.0.0.1:`)
	assert.Contains(t, logs, `"owners":["a"],"fences":[`+strconv.FormatInt(a.Int("fence"), 10)+`]`)
	assert.Contains(t, logs, `"request_id":"`+f.Header.Get("X-Request-Id")+`"`)
	assert.NotContains(t, logs, `"principal":""`, "no principal without authentication")

	// The hand-off goes on as on a release.
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/f", testkit.TokenHeader(got.Str("token")), "").Status)
	gc := <-c
	require.Equal(t, http.StatusCreated, gc.Status, string(gc.Body))
	assert.Equal(t, "c", gc.Str("owner"))
}

func TestForceReleaseEndsTheWatchdogDuty(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the watchdog schedule's key, which Cluster shards")
	e := testkit.NewEnv(t, nil)
	a := e.Client.Do(http.MethodPost, "/locks/wd", nil, testkit.WatchdogBody("a", 600, ""))
	require.Equal(t, http.StatusCreated, a.Status, string(a.Body))
	registry := e.Gateway.KeyPrefix + "watchdog"
	require.Equal(t, "1", e.Redis.MustDo(t, "ZCARD", registry))

	f := e.Client.Do(http.MethodDelete, "/locks/wd?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	assert.Equal(t, "0", e.Redis.MustDo(t, "ZCARD", registry), "the duty is dropped with the force release")
	assert.Equal(t, "0", e.Redis.MustDo(t, "EXISTS", e.Gateway.KeyPrefix+"{wd}"))
	// Past several of the old lease's renewal periods, nothing has brought it back.
	b := e.Hold(t, e.Client, "wd", "b", 1500)
	harness.Eventually(t, 5*time.Second, "b's lease running out (no watchdog renews it)", func() bool {
		return e.Client.Do(http.MethodGet, "/locks/wd", nil, "").JSON()["held"] == false
	})
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/wd/renew", testkit.TokenHeader(a.Str("token")), "").Status)
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/wd/renew", testkit.TokenHeader(b.Str("token")), "").Status)
}

func TestForceReleaseOfSharedHoldsAndSemaphores(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	var readers []*harness.Response
	for _, r := range []string{"r1", "r2"} {
		res := e.Client.Do(http.MethodPost, "/locks/rw", nil, `{"owner":"`+r+`","mode":"shared","ttl_ms":60000}`)
		require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
		readers = append(readers, res)
	}
	w := testkit.StartWaiter(e.Client, context.Background(), "rw", "writer", 30000, 20000)
	harness.Eventually(t, 5*time.Second, "the writer queued", func() bool { return e.Waiters(t, "rw") == 1 })
	f := e.Client.Do(http.MethodDelete, "/locks/rw?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	assert.Equal(t, int64(2), f.Int("holds_removed"))
	got := <-w
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "writer", got.Str("owner"))
	for _, r := range readers {
		assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/rw/renew", testkit.TokenHeader(r.Str("token")), "").Status)
	}

	var permits []*harness.Response
	for _, o := range []string{"p1", "p2"} {
		res := e.Client.Do(http.MethodPost, "/semaphores/pool", nil, `{"owner":"`+o+`","permits":2,"ttl_ms":60000}`)
		require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
		permits = append(permits, res)
	}
	p3 := make(chan *harness.Response, 1)
	go func() {
		p3 <- e.Client.Do(http.MethodPost, "/semaphores/pool", nil, `{"owner":"p3","permits":2,"ttl_ms":30000,"wait_ms":20000}`)
	}()
	harness.Eventually(t, 5*time.Second, "p3 queued", func() bool {
		return e.Client.Do(http.MethodGet, "/semaphores/pool", nil, "").Int("waiters") == 1
	})
	f = e.Client.Do(http.MethodDelete, "/semaphores/pool?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	assert.Equal(t, int64(2), f.Int("holds_removed"))
	var owners []string
	for _, h := range f.JSON()["removed"].([]any) {
		assert.Equal(t, "shared", h.(map[string]any)["mode"], "a permit is a shared hold")
		owners = append(owners, h.(map[string]any)["owner"].(string))
	}
	assert.ElementsMatch(t, []string{"p1", "p2"}, owners)
	got = <-p3
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, int64(1), got.Int("used"))
	for _, p := range permits {
		assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodDelete, "/semaphores/pool", testkit.TokenHeader(p.Str("token")), "").Status)
	}
}

// TestThe410SaysHowTheLeaseEnded: a token whose lease was force-released is answered 410 saying so
// (on every call that takes it: renew, release, re-entry, events stream; a permit's and a
// multi-lock member's too), from the mark the force release left in Redis; one that expired or
// was released is answered 410 saying that, and that it was not forced. Problem types stay. A
// forced one's problem also carries forced_at, the time of the force release, for clients to read
// rather than the detail's words; the others carry none.
func TestThe410SaysHowTheLeaseEnded(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	const forcedText = "an operator force-released it at "
	gone := func(r *harness.Response, what string) string {
		t.Helper()
		require.Equal(t, http.StatusGone, r.Status, "%s: %s", what, r.Body)
		assert.Equal(t, "urn:leasegate:problem:lease-gone", r.Str("type"), what)
		return r.Str("detail")
	}

	a := e.Hold(t, e.Client, "ended.forced", "a", 60000)
	tok := testkit.TokenHeader(a.Str("token"))
	f := e.Client.Do(http.MethodDelete, "/locks/ended.forced?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	for what, r := range map[string]*harness.Response{
		"renew":    e.Client.Do(http.MethodPost, "/locks/ended.forced/renew", tok, ""),
		"release":  e.Client.Do(http.MethodDelete, "/locks/ended.forced", tok, ""),
		"re-entry": e.Client.Do(http.MethodPost, "/locks/ended.forced", tok, testkit.AcquireBody("a", 30000)),
		"events":   e.Client.Do(http.MethodGet, "/locks/ended.forced/events", tok, ""),
	} {
		detail := gone(r, what)
		assert.Contains(t, detail, forcedText, what)
		assert.Contains(t, detail, `lock "ended.forced"`, what)
		at, err := time.Parse(time.RFC3339Nano, r.Str("forced_at"))
		require.NoError(t, err, "%s: forced_at %q", what, r.Str("forced_at"))
		assert.WithinDuration(t, time.Now(), at, time.Minute, what)
		assert.Contains(t, detail, r.Str("forced_at"), "%s: the detail and forced_at say the same time", what)
	}
	// A shared holder's, and a permit's.
	sh := e.Client.Do(http.MethodPost, "/locks/ended.rw", nil, `{"owner":"r","mode":"shared","ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, sh.Status, string(sh.Body))
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/ended.rw?force=true", nil, "").Status)
	assert.Contains(t, gone(e.Client.Do(http.MethodDelete, "/locks/ended.rw?mode=shared", testkit.TokenHeader(sh.Str("token")), ""), "shared"), forcedText)
	p := e.Client.Do(http.MethodPost, "/semaphores/ended.pool", nil, testkit.PermitBody("p", 2, 60000, 0))
	require.Equal(t, http.StatusCreated, p.Status, string(p.Body))
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/semaphores/ended.pool?force=true", nil, "").Status)
	detail := gone(e.Client.Do(http.MethodPost, "/semaphores/ended.pool/renew", testkit.TokenHeader(p.Str("token")), ""), "permit")
	assert.Contains(t, detail, forcedText)
	assert.Contains(t, detail, `semaphore "ended.pool"`)

	// Released, then used again; expired: not forced, and the detail says what is known.
	r := e.Hold(t, e.Client, "ended.released", "r", 60000)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/ended.released", testkit.TokenHeader(r.Str("token")), "").Status)
	x := e.Hold(t, e.Client, "ended.expired", "x", 300)
	harness.Eventually(t, 5*time.Second, "the lease to expire", func() bool { return !e.Held("ended.expired") })
	for what, r := range map[string]*harness.Response{
		"released": e.Client.Do(http.MethodDelete, "/locks/ended.released", testkit.TokenHeader(r.Str("token")), ""),
		"expired":  e.Client.Do(http.MethodPost, "/locks/ended.expired/renew", testkit.TokenHeader(x.Str("token")), ""),
	} {
		detail := gone(r, what)
		assert.Contains(t, detail, "it expired (no renewal within its TTL) or was released with its own token; it was not force-released", what)
		assert.Empty(t, r.Str("forced_at"), what)
	}
	// A release of a way the lease does not hold says so, not that the lease is gone.
	ex := e.Hold(t, e.Client, "ended.ways", "w", 60000)
	detail = gone(e.Client.Do(http.MethodDelete, "/locks/ended.ways?mode=shared", testkit.TokenHeader(ex.Str("token")), ""), "no shared hold")
	assert.Contains(t, detail, "it has no shared hold")
	assert.True(t, e.Held("ended.ways"))

	// A multi-lock whose member was force-released.
	g := testkit.LockAll(e.Client, "group", []string{"ended.m1", "ended.m2"}, 60000, 0, "")
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/ended.m2?force=true", nil, "").Status)
	detail = gone(e.Client.Do(http.MethodPost, "/multilocks/renew", testkit.TokenHeader(g.Str("token")), ""), "multi-lock")
	assert.Contains(t, detail, `no longer holds ["ended.m2"] (an operator force-released them)`)

	// The marks are plain strings that expire with the fence key, never listed as locks.
	if testkit.Deployment == "" || testkit.Deployment == "standalone" {
		mark := e.Gateway.KeyPrefix + "{ended.forced}:forced:"
		keys := e.Redis.MustDo(t, "KEYS", mark+"*")
		require.NotEmpty(t, keys)
		pttl := testkit.Atoi(t, e.Redis.MustDo(t, "PTTL", keys))
		assert.Positive(t, pttl)
		assert.LessOrEqual(t, pttl, (24 * time.Hour).Milliseconds(), "kept as long as the fence key (LEASEGATE_FENCE_TTL)")
	}
	list := e.Client.Do(http.MethodGet, "/locks?prefix=ended.", nil, "")
	require.Equal(t, http.StatusOK, list.Status, string(list.Body))
	var names []string
	for _, l := range list.JSON()["locks"].([]any) {
		names = append(names, l.(map[string]any)["lock"].(string))
	}
	assert.Equal(t, []string{"ended.ways"}, names, "only what is held (the group's 410 gave ended.m1 back)")
}

func TestForceReleaseOfAFreeLock(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	f := e.Client.Do(http.MethodDelete, "/locks/free?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	assert.JSONEq(t, `{"lock":"free","released":true,"forced":true,"holds_removed":0,"removed":[]}`, string(f.Body))
}

// TestForceReleaseBadInputChangesNothing: every malformed force release is a 400 answered before
// Redis is touched, and the holder keeps its lock.
func TestForceReleaseBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	a := e.Hold(t, e.Client, "keep", "a", 60000)
	tok := a.Str("token")
	var before map[string]int64
	if testkit.Deployment == "" || testkit.Deployment == "standalone" {
		before = testkit.EvalCalls(t, e)
	}
	for _, c := range []struct {
		path    string
		headers harness.Headers
		param   string
	}{
		{"/locks/keep?force=false", nil, "force"},
		{"/locks/keep?force=1", nil, "force"},
		{"/locks/keep?force=", nil, "force"},
		{"/locks/keep?force=TRUE", nil, "force"},
		{"/locks/keep?force=true&force=true", nil, "force"},
		{"/locks/keep?force=true", testkit.TokenHeader(tok), "Lease-Token"},
		{"/locks/keep?force=false", testkit.TokenHeader(tok), "force"},
		{"/locks/keep?force=true&mode=shared", nil, "mode"},
		{"/locks/keep?force=true", harness.Headers{"Idempotency-Key": "k1"}, "Idempotency-Key"},
		{"/semaphores/keep?force=no", nil, "force"},
	} {
		r := e.Client.Do(http.MethodDelete, c.path, c.headers, "")
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", c.path, r.Body)
		assert.Equal(t, "urn:leasegate:problem:invalid-request", r.Str("type"), c.path)
		params, _ := r.JSON()["invalid_params"].([]any)
		require.Len(t, params, 1, c.path)
		assert.Equal(t, c.param, params[0].(map[string]any)["name"], c.path)
	}
	r := e.Client.Do(http.MethodDelete, "/locks/keep?force=true", testkit.TokenHeader(tok), "")
	assert.Contains(t, r.Str("detail"), "takes no Lease-Token", "the problem says why")
	r = e.Client.Do(http.MethodDelete, "/locks/bad%20name?force=true", nil, "")
	assert.Equal(t, "urn:leasegate:problem:invalid-lock-name", r.Str("type"))

	if before != nil {
		assert.Equal(t, before, testkit.EvalCalls(t, e), "no script ran")
	}
	st := e.Client.Do(http.MethodGet, "/locks/keep", testkit.TokenHeader(tok), "")
	assert.Equal(t, true, st.JSON()["yours"], "the holder keeps its lock")
	assert.Equal(t, a.Int("fence"), st.Int("fence"))
	assert.NotContains(t, e.Gateway.Logs(), "lock force-released")
}

// TestForceReleaseNeverYieldsTwoHolders races waiting acquirers on two replicas against repeated
// force releases, and checks the lock's history as its event stream tells it (in the order Redis
// ran the scripts): no grant while another hold is in, fences strictly rising, every 201's fence
// granted once, and no force ever finding more than one hold of the exclusive lock.
func TestForceReleaseNeverYieldsTwoHolders(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	const lock = "race"
	s := testkit.OpenEvents(t, p.Gateway.URL, "/locks/"+lock+"/events", nil)
	s.Expect(t, "state", "")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := map[int64]string{}
	var problems []string
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := p.Replica(i)
			owner := fmt.Sprintf("w%d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := c.Do(http.MethodPost, "/locks/"+lock, nil, testkit.WaitBody(owner, 10000, 3000))
				if r.Status != http.StatusCreated {
					continue // 409 after the wait: try again
				}
				mu.Lock()
				if prev, dup := granted[r.Int("fence")]; dup {
					problems = append(problems, fmt.Sprintf("fence %d granted to %s and %s", r.Int("fence"), prev, owner))
				}
				granted[r.Int("fence")] = owner
				mu.Unlock()
				tok := testkit.TokenHeader(r.Str("token"))
				if rn := c.Do(http.MethodPost, "/locks/"+lock+"/renew", tok, ""); rn.Status != http.StatusOK && rn.Status != http.StatusGone {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("renew answered %d: %s", rn.Status, rn.Body))
					mu.Unlock()
				}
				if rl := c.Do(http.MethodDelete, "/locks/"+lock, tok, ""); rl.Status != http.StatusOK && rl.Status != http.StatusGone {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("release answered %d: %s", rl.Status, rl.Body))
					mu.Unlock()
				}
			}
		}()
	}
	forced := 0
	pace := time.NewTicker(15 * time.Millisecond)
	for i := range 40 {
		<-pace.C
		f := p.Replica(i).Do(http.MethodDelete, "/locks/"+lock+"?force=true", nil, "")
		require.Equal(t, http.StatusOK, f.Status, string(f.Body))
		n := f.Int("holds_removed")
		assert.LessOrEqual(t, n, int64(1), "an exclusive lock never has two holds to remove")
		forced += int(n)
	}
	pace.Stop()
	close(stop)
	wg.Wait()
	require.Empty(t, problems)
	harness.Eventually(t, 10*time.Second, "the lock free and nobody waiting", func() bool {
		st := p.Client.Do(http.MethodGet, "/locks/"+lock, nil, "")
		return st.JSON()["held"] == false && st.Int("waiters") == 0
	})
	// A last grant and release mark the end of the history: events arrive in order.
	m := p.Hold(t, p.Client, lock, "marker", 60000)
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/"+lock, testkit.TokenHeader(m.Str("token")), "").Status)

	holders := map[int64]string{} // fence -> owner, as the events tell it
	var lastFence int64
	seen := map[int64]bool{}
	resynced := false
	for done := false; !done; {
		ev := s.Next(t, 10*time.Second)
		switch ev.Type {
		case "state":
			resynced = true
			clear(holders)
			if ev.Data["held"] == true {
				holders[ev.Int("fence")] = ev.Str("owner")
			}
		case "granted":
			require.Empty(t, holders, "event %s: %s granted fence %d while %v hold", ev.ID, ev.Str("owner"), ev.Int("fence"), holders)
			require.Greater(t, ev.Int("fence"), lastFence, "fences rise")
			lastFence = ev.Int("fence")
			holders[ev.Int("fence")] = ev.Str("owner")
			seen[ev.Int("fence")] = true
		case "released", "expired":
			delete(holders, ev.Int("fence"))
			done = ev.Str("owner") == "marker"
		case "forced":
			holds, _ := ev.Data["holds"].([]any)
			require.LessOrEqual(t, len(holds), 1)
			for _, h := range holds {
				n, _ := strconv.ParseInt(fmt.Sprint(h.(map[string]any)["fence"]), 10, 64)
				delete(holders, n)
			}
		}
	}
	if resynced {
		t.Log("the stream resynced: skipping the check that every 201 was seen granted")
		return
	}
	for fence, owner := range granted {
		assert.True(t, seen[fence], "the 201 of %s (fence %d) was granted in the history", owner, fence)
	}
	t.Logf("%d grants, %d holds forced away", len(granted), forced)
}
