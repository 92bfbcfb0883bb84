package operations

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// num reads a JSON number the harness decoded.
func num(v any) int64 {
	n, _ := v.(json.Number).Int64()
	return n
}

// listAll follows GET path's next_cursor to the end and returns every entry's key field, counting
// the pages.
func listAll(t *testing.T, e *testkit.Env, path, field, key string, limit int) (names map[string]map[string]any, pages int) {
	t.Helper()
	names = map[string]map[string]any{}
	cursor := ""
	for {
		r := e.Client.Do(http.MethodGet, fmt.Sprintf("%s&limit=%d&cursor=%s", path, limit, url.QueryEscape(cursor)), nil, "")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		pages++
		for _, it := range r.JSON()[field].([]any) {
			m := it.(map[string]any)
			names[m[key].(string)] = m
		}
		if cursor = r.Str("next_cursor"); cursor == "" {
			return names, pages
		}
		require.Less(t, pages, 100000, "the listing never ends")
	}
}

func TestAdminListShowsHoldersAndWaiters(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	x := e.Client.Do(http.MethodPost, "/locks/adm.x", nil, testkit.WatchdogBody("writer", 30000, ""))
	require.Equal(t, http.StatusCreated, x.Status)
	for _, o := range []string{"r1", "r2"} {
		require.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/locks/adm.s", nil, testkit.SharedBody(o, 30000, 0)).Status)
	}
	require.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/locks/other.y", nil, testkit.AcquireBody("elsewhere", 30000)).Status)
	require.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/semaphores/adm.sem", nil, testkit.PermitBody("p1", 3, 30000, 0)).Status)
	waiter := testkit.StartWaiterBody(e.Client, "adm.x", testkit.WaitBody("queued", 30000, 10000))
	harness.Eventually(t, 5*time.Second, "the waiter queued", func() bool { return e.Waiters(t, "adm.x") == 1 })

	locks, _ := listAll(t, e, "/locks?prefix=adm.", "locks", "lock", 100)
	require.Len(t, locks, 2)
	assert.Equal(t, "writer", locks["adm.x"]["owner"])
	assert.Equal(t, "exclusive", locks["adm.x"]["mode"])
	assert.Equal(t, true, locks["adm.x"]["watchdog"])
	assert.Equal(t, int64(1), num(locks["adm.x"]["waiters"]))
	assert.Equal(t, x.Int("fence"), num(locks["adm.x"]["fence"]))
	assert.GreaterOrEqual(t, num(locks["adm.x"]["age_ms"]), int64(0))
	assert.Equal(t, "shared", locks["adm.s"]["mode"])
	assert.Equal(t, int64(2), num(locks["adm.s"]["holders"]))

	all, _ := listAll(t, e, "/locks?prefix=", "locks", "lock", 100)
	assert.Len(t, all, 3, "every held lock without a prefix")

	sems, _ := listAll(t, e, "/semaphores?prefix=adm", "semaphores", "name", 100)
	require.Len(t, sems, 1)
	assert.Equal(t, int64(3), num(sems["adm.sem"]["permits"]))
	assert.Equal(t, int64(1), num(sems["adm.sem"]["used"]))

	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/adm.x", testkit.TokenHeader(x.Str("token")), "").Status)
	require.Equal(t, http.StatusCreated, (<-waiter).Status)

	// A refused acquire and a wait count toward the most contended names (this replica).
	require.Equal(t, http.StatusConflict, e.Client.Do(http.MethodPost, "/locks/other.y", nil, testkit.AcquireBody("late", 30000)).Status)
	top := e.Client.Do(http.MethodGet, "/admin/top", nil, "")
	require.Equal(t, http.StatusOK, top.Status)
	contended := top.JSON()["most_contended"].([]any)
	require.Len(t, contended, 2, string(top.Body))
	assert.ElementsMatch(t, []string{"adm.x", "other.y"},
		[]string{contended[0].(map[string]any)["lock"].(string), contended[1].(map[string]any)["lock"].(string)})
}

// TestAdminListNamesHoldersWaitersAndGroups checks the listings' held_by and waiting: every
// holder of a shared lock, who waits for a lock and a semaphore and since when, and a multi-lock's
// members showing its group's id, holding and waiting.
func TestAdminListNamesHoldersWaitersAndGroups(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	for _, o := range []string{"r1", "r2"} {
		require.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/locks/who.shared", nil, testkit.SharedBody(o, 30000, 0)).Status)
	}
	require.Equal(t, http.StatusCreated, e.Client.Do(http.MethodPost, "/semaphores/who.sem", nil, testkit.PermitBody("p1", 1, 30000, 0)).Status)
	group := testkit.LockAll(e.Client, "grouped", []string{"who.m1", "who.m2"}, 30000, 0, "")
	require.Equal(t, http.StatusCreated, group.Status, string(group.Body))

	before := time.Now()
	writer := testkit.StartWaiterBody(e.Client, "who.shared", testkit.WaitBody("writer", 30000, 10000))
	harness.Eventually(t, 5*time.Second, "the writer queued", func() bool { return e.Waiters(t, "who.shared") == 1 })
	permit := make(chan *harness.Response, 1)
	go func() {
		permit <- e.Client.Do(http.MethodPost, "/semaphores/who.sem", nil, testkit.PermitBody("p2", 1, 30000, 10000))
	}()
	// A second group waits for who.m2 (its first member, in name order), with its lease.
	second := make(chan *harness.Response, 1)
	go func() { second <- testkit.LockAll(e.Client, "second", []string{"who.m2", "who.m3"}, 30000, 10000, "") }()
	harness.Eventually(t, 5*time.Second, "the group queued", func() bool { return e.Waiters(t, "who.m2") == 1 })

	locks, _ := listAll(t, e, "/locks?prefix=who.", "locks", "lock", 100)
	require.Len(t, locks, 3)
	holders := func(entry map[string]any) (owners, modes []string, groups []string) {
		for _, h := range entry["held_by"].([]any) {
			m := h.(map[string]any)
			owners, modes = append(owners, m["owner"].(string)), append(modes, fmt.Sprint(m["mode"]))
			groups = append(groups, fmt.Sprint(m["multilock"]))
			assert.Greater(t, num(m["fence"]), int64(0))
			assert.Greater(t, num(m["ttl_ms"]), int64(0))
			assert.GreaterOrEqual(t, num(m["age_ms"]), int64(0))
		}
		return owners, modes, groups
	}
	owners, modes, _ := holders(locks["who.shared"])
	assert.ElementsMatch(t, []string{"r1", "r2"}, owners, "every holder of a shared lock")
	assert.Equal(t, []string{"shared", "shared"}, modes)
	waiting := locks["who.shared"]["waiting"].([]any)
	require.Len(t, waiting, 1)
	w := waiting[0].(map[string]any)
	assert.Equal(t, "writer", w["owner"])
	assert.Equal(t, "exclusive", w["mode"])
	assert.Nil(t, w["multilock"])
	since, err := time.Parse(time.RFC3339Nano, w["since"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, before, since, 5*time.Second)
	assert.GreaterOrEqual(t, num(w["waited_ms"]), int64(0))

	for _, member := range []string{"who.m1", "who.m2"} {
		owners, modes, groups := holders(locks[member])
		assert.Equal(t, []string{"grouped"}, owners, member)
		assert.Equal(t, []string{"exclusive"}, modes, member)
		assert.Equal(t, []string{group.Str("id")}, groups, "%s: held by the group's lease", member)
	}
	assert.Empty(t, locks["who.m1"]["waiting"])
	waiting = locks["who.m2"]["waiting"].([]any)
	require.Len(t, waiting, 1)
	w = waiting[0].(map[string]any)
	assert.Equal(t, "second", w["owner"])
	assert.True(t, strings.HasPrefix(w["multilock"].(string), "m-"), "a group waits with its lease: %v", w)
	assert.NotEqual(t, group.Str("id"), w["multilock"])

	harness.Eventually(t, 5*time.Second, "the permit's waiter queued", func() bool {
		return e.Client.Do(http.MethodGet, "/semaphores/who.sem", nil, "").Int("waiters") == 1
	})
	sems, _ := listAll(t, e, "/semaphores?prefix=who.", "semaphores", "name", 100)
	require.Len(t, sems, 1)
	held := sems["who.sem"]["held_by"].([]any)
	require.Len(t, held, 1)
	assert.Equal(t, "p1", held[0].(map[string]any)["owner"])
	assert.Nil(t, held[0].(map[string]any)["mode"], "a permit has no mode")
	waiting = sems["who.sem"]["waiting"].([]any)
	require.Len(t, waiting, 1)
	assert.Equal(t, "p2", waiting[0].(map[string]any)["owner"])
	assert.Nil(t, waiting[0].(map[string]any)["mode"])

	// Let the waiters through.
	r := e.Client.Do(http.MethodDelete, "/locks/who.shared?force=true", nil, "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, http.StatusCreated, (<-writer).Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/semaphores/who.sem?force=true", nil, "").Status)
	require.Equal(t, http.StatusCreated, (<-permit).Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/multilocks", testkit.TokenHeader(group.Str("token")), "").Status)
	require.Equal(t, http.StatusCreated, (<-second).Status)
}

func TestAdminListRefusesBadQueries(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	for _, q := range []string{"prefix=a%20b", "prefix=" + strings.Repeat("a", 201), "limit=0", "limit=1001", "limit=x",
		"cursor=nonsense", "cursor=7-0"} {
		for _, path := range []string{"/locks?", "/semaphores?"} {
			r := e.Client.Do(http.MethodGet, path+q, nil, "")
			assert.Equal(t, http.StatusBadRequest, r.Status, path+q)
			assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), path+q)
		}
	}
}

// TestAdminListPaginatesTenThousandLocksWithoutKeys holds 10,000 locks and lists them all in pages
// of 500: every one appears, and Redis ran SCAN, never KEYS. The locks are taken 50 at a time, as
// multi-locks: 200 requests rather than 10,000 (which took 10-50 s of a busy machine); each member
// is a lock of its own in the listing.
func TestAdminListPaginatesTenThousandLocksWithoutKeys(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads INFO commandstats of the one server")
	e := testkit.NewEnv(t, nil)
	const n, members = 10000, 50
	var wg sync.WaitGroup
	groups := make(chan int, n/members)
	for i := range n / members {
		groups <- i
	}
	close(groups)
	for range 8 {
		wg.Go(func() {
			for g := range groups {
				names := make([]string, members)
				for m := range names {
					names[m] = fmt.Sprintf("bulk.%05d", g*members+m)
				}
				r := e.Client.Do(http.MethodPost, "/multilocks", nil, testkit.MultiBody("bulk", names, 600000, 0, ""))
				if r.Status != http.StatusCreated {
					t.Errorf("group %d: %d %s", g, r.Status, r.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	e.Redis.MustDo(t, "CONFIG", "RESETSTAT")

	locks, pages := listAll(t, e, "/locks?prefix=bulk.", "locks", "lock", 500)
	assert.Len(t, locks, n)
	assert.Greater(t, pages, 10, "paginated")
	stats := e.Redis.MustDo(t, "INFO", "commandstats")
	assert.NotContains(t, stats, "cmdstat_keys:")
	assert.Contains(t, stats, "cmdstat_scan:")
	t.Logf("%d locks in %d pages", len(locks), pages)
}
