package sharedlocks

// Redisson's RedissonPermitExpirableSemaphoreTest, ported to HTTP on /semaphores/{name}. A Redisson
// permit id is a permit's lease token here (a bearer credential: anyone holding it may release);
// availablePermits() is permits - used of GET; a semaphore's size is set by its first acquirer
// (there is no trySetPermits, addPermits or setPermits) and one request takes one permit, so the
// multi-permit calls become one request per permit. There are no permanent permits: every permit
// has a TTL (30 s by default) or a watchdog. Times are scaled to hundreds of milliseconds and read
// from the Redis clock through fences (see redisson_rwlock_test.go).
//
// Java tests already covered exactly by scenario tests elsewhere (not repeated here):
//   - testTrySetPermits, and the adaptable part of testSetPermits (the size is set once, a second
//     size is refused and changes nothing, a fresh size is taken once the semaphore is idle):
//     TestSemaphorePermitsMismatch, semaphore_test.go.
//   - testConcurrencyMultiPermits (two acquirers of size-many permits both succeed in turn): with
//     one permit per request it is TestRedissonSemaphoreBlockingAcquire below, and
//     TestSemaphorePermitExpiryGoesToTheHeadWaiter, semaphore_test.go.
// Folded into other tests: testAcquiredPermits, testGetPermits and testAcquire into
// TestRedissonSemaphoreAvailablePermits (testAcquire's "within 100 ms" is not asserted: these
// tests never assert on speed); testExpireTryAcquire into TestRedissonSemaphoreExpire;
// testBlockingAcquireMany and testTryAcquireMany into TestRedissonSemaphoreRelease.
// Not applicable: testGetInClusterNameMapper (Redis Cluster and name mappers), testAddPermits (no
// resizing), testAcquireAsyncMany and testReleaseAsyncMany (multi-permit batches; their one-permit
// shape is TestRedissonSemaphoreRelease).

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// tryPermit is a try-once acquire of one permit of a semaphore of size permits; it must succeed.
func (w *redissonWorld) tryPermit(t *testing.T, c *harness.Client, name, owner string, permits, ttlMs int64) *harness.Response {
	t.Helper()
	r := c.Do(http.MethodPost, "/semaphores/"+name, nil, testkit.PermitBody(owner, permits, ttlMs, 0))
	require.Equal(t, http.StatusCreated, r.Status, "%s takes a permit of %q: %s", owner, name, r.Body)
	return r
}

// givePermitBack gives back the permit token names; it must be its last hold.
func (w *redissonWorld) givePermitBack(t *testing.T, c *harness.Client, name, token string) {
	t.Helper()
	r := deleteWith(c, "/semaphores/"+name, token)
	require.Equal(t, http.StatusOK, r.Status, "release a permit of %q: %s", name, r.Body)
	assert.Equal(t, true, r.JSON()["released"])
}

// permitHolders lists the owners GET /semaphores/{name} reports as holders, sorted.
func (w *redissonWorld) permitHolders(name string) []string {
	var out []string
	holders, _ := w.semState(name).JSON()["holders"].([]any)
	for _, h := range holders {
		out = append(out, h.(map[string]any)["owner"].(string))
	}
	slices.Sort(out)
	return out
}

// testUpdateLeaseTime: updating an unknown permit fails; a permit's lease updated to 3 s keeps it
// taken past its first lease and frees it at 3 s; updating an expired permit fails. Here with the
// renew endpoint: a garbage token is a 400, a released permit's a 410; a 600 ms permit renewed to
// 1200 ms is granted to a waiter no earlier than 1200 ms after its first grant; then its renewal
// answers 410.
func TestRedissonSemaphoreUpdateLeaseTime(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r := w.replica(0).Do(http.MethodPost, "/semaphores/ult/renew", testkit.TokenHeader("garbage"), `{"ttl_ms":1000}`)
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, "urn:leasegate:problem:invalid-lease-token", r.Str("type"))
	old := w.tryPermit(t, w.replica(0), "ult", "old", 1, 60000)
	w.givePermitBack(t, w.replica(0), "ult", old.Str("token"))
	r = w.replica(1).Do(http.MethodPost, "/semaphores/ult/renew", testkit.TokenHeader(old.Str("token")), `{"ttl_ms":1000}`)
	assert.Equal(t, http.StatusGone, r.Status, "%s", r.Body)

	p := w.tryPermit(t, w.replica(0), "ult", "p", 1, 600)
	r = w.replica(1).Do(http.MethodPost, "/semaphores/ult/renew", testkit.TokenHeader(p.Str("token")), `{"ttl_ms":1200}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, int64(1200), r.Int("ttl_ms"))
	assert.Equal(t, p.Int("fence"), r.Int("fence"))
	q := w.response(t, postPermit(w.replica(1), "ult", testkit.PermitBody("q", 1, 60000, 5000)), "q's wait")
	require.Equal(t, http.StatusCreated, q.Status, "%s", q.Body)
	assert.GreaterOrEqual(t, q.Int("fence"), p.Int("fence")+1_199_000, "the renewed permit stayed taken for its new lease")
	r = w.replica(0).Do(http.MethodPost, "/semaphores/ult/renew", testkit.TokenHeader(p.Str("token")), `{"ttl_ms":1200}`)
	assert.Equal(t, http.StatusGone, r.Status, "%s", r.Body)
	assert.Equal(t, []string{"q"}, w.permitHolders("ult"))
}

// testNotExistent: a semaphore never created has 0 available permits. Here GET of an unused
// semaphore answers the empty state on either replica and creates nothing in Redis.
func TestRedissonSemaphoreNotExistent(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the Redis keyspace")
	w := newRedissonWorld(t)
	for i := range 2 {
		st := w.replica(i).Do(http.MethodGet, "/semaphores/never", nil, "")
		require.Equal(t, http.StatusOK, st.Status, "%s", st.Body)
		assert.Equal(t, "never", st.Str("name"))
		assert.Equal(t, int64(0), st.Int("permits"))
		assert.Equal(t, int64(0), st.Int("used"))
		assert.Equal(t, int64(0), st.Int("holder_count"))
		assert.Equal(t, int64(0), st.Int("waiters"))
		assert.Equal(t, []any{}, st.JSON()["holders"])
		assert.Nil(t, st.JSON()["yours"])
	}
	assert.Equal(t, "0", w.Redis.MustDo(t, "DBSIZE"), "inspecting creates nothing")
}

// testAvailablePermits (and testAcquiredPermits, testGetPermits, testAcquire): a semaphore of 2
// has 2 available; two permits with a 1 s lease are taken; a third waits 200 ms in vain; once the
// leases run out, without a release, both permits are available again and a fourth is taken.
func TestRedissonSemaphoreAvailablePermits(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	st := w.semState("ap")
	assert.Equal(t, int64(0), st.Int("used"))
	p1 := w.tryPermit(t, w.replica(0), "ap", "p1", 2, 1000)
	assert.Equal(t, int64(2), p1.Int("permits"))
	assert.Equal(t, int64(1), p1.Int("used"))
	p2 := w.tryPermit(t, w.replica(1), "ap", "p2", 2, 1000)
	assert.Equal(t, int64(2), p2.Int("used"))
	st = w.semState("ap")
	assert.Equal(t, int64(2), st.Int("permits"))
	assert.Equal(t, int64(2), st.Int("used"))

	p3 := w.response(t, postPermit(w.replica(0), "ap", testkit.PermitBody("p3", 2, 1000, 200)), "p3's wait")
	assert.Equal(t, http.StatusConflict, p3.Status, "%s", p3.Body)
	assert.Equal(t, "urn:leasegate:problem:semaphore-full", p3.Str("type"))
	assert.GreaterOrEqual(t, p3.Int("waited_ms"), int64(200))
	st = w.semState("ap")
	assert.Equal(t, int64(2), st.Int("permits"), "the size stays")
	assert.Equal(t, int64(2), st.Int("used"))
	assert.Equal(t, int64(0), st.Int("waiters"))

	w.awaitRedisClock(t, max(p1.Int("fence"), p2.Int("fence"))+1_002_000, "both leases to run out")
	assert.Equal(t, int64(0), w.semState("ap").Int("used"), "expired permits are free without a release")
	p4 := w.tryPermit(t, w.replica(1), "ap", "p4", 2, 300)
	assert.Equal(t, int64(1), p4.Int("used"))
	harness.Eventually(t, 5*time.Second, "p4's lease to run out", func() bool { return w.semState("ap").Int("used") == 0 })
}

// testExpiration: a semaphore whose permit (lease 1 s) runs out leaves no key in Redis. Here: once
// a permit ran out, no key of the semaphore is left: only the fence floor every lock and semaphore
// of the Redis shares, with a TTL (LEASEGATE_FENCE_TTL); a permit that is released leaves no key
// without a TTL either.
func TestRedissonSemaphoreExpiration(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the Redis keyspace")
	w := newRedissonWorld(t)
	p := w.tryPermit(t, w.replica(0), "exp", "p", 1, 300)
	w.awaitRedisClock(t, p.Int("fence")+302_000, "the permit's lease to run out")
	fence := w.Gateway.KeyPrefix + "fence"
	harness.Eventually(t, 5*time.Second, "only the fence floor left", func() bool {
		return w.Redis.MustDo(t, "KEYS", w.Gateway.KeyPrefix+"*") == fence
	})
	assert.Positive(t, testkit.Atoi(t, w.Redis.MustDo(t, "PTTL", fence)), "the fence floor expires")

	r := w.tryPermit(t, w.replica(1), "rel", "r", 1, 60000)
	w.givePermitBack(t, w.replica(0), "rel", r.Str("token"))
	keys := w.Redis.MustDo(t, "KEYS", w.Gateway.KeyPrefix+"{rel}*")
	for _, k := range strings.Split(keys, "\n") {
		assert.Positive(t, testkit.Atoi(t, w.Redis.MustDo(t, "PTTL", k)), "key %s expires", k)
	}
}

// testExpire (and testExpireTryAcquire): a permit with a 2 s lease is taken; another thread's
// blocking acquire gets it when the lease runs out, and releases it; the first permit's release
// then fails. Here with 500 ms.
func TestRedissonSemaphoreExpire(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	p1 := w.tryPermit(t, w.replica(0), "ex", "p1", 1, 500)
	p2 := w.response(t, postPermit(w.replica(1), "ex", testkit.PermitBody("p2", 1, 60000, 5000)), "p2's wait")
	require.Equal(t, http.StatusCreated, p2.Status, "%s", p2.Body)
	assert.GreaterOrEqual(t, p2.Int("fence"), p1.Int("fence")+499_000, "not before p1's lease ran out")
	assert.Equal(t, []string{"p2"}, w.permitHolders("ex"))
	w.givePermitBack(t, w.replica(1), "ex", p2.Str("token"))
	gone := deleteWith(w.replica(0), "/semaphores/ex", p1.Str("token"))
	assert.Equal(t, http.StatusGone, gone.Status, "%s", gone.Body)
	assert.Equal(t, "urn:leasegate:problem:lease-gone", gone.Str("type"))
	assert.Equal(t, int64(0), w.semState("ex").Int("used"))
}

// testBlockingAcquire: a permit is taken; another thread releases it by its id a second later; the
// main thread's blocking acquire gets it then, after which a try fails and 0 are available. Here
// the release goes through the other replica, carrying the first permit's token.
func TestRedissonSemaphoreBlockingAcquire(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	p1 := w.tryPermit(t, w.replica(0), "ba", "p1", 1, 60000)
	p2 := postPermit(w.replica(0), "ba", testkit.PermitBody("p2", 1, 60000, 10000))
	w.awaitSemWaiters(t, "ba", 1)
	w.givePermitBack(t, w.replica(1), "ba", p1.Str("token"))
	got := w.response(t, p2, "p2's wait")
	require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
	assert.Greater(t, got.Int("fence"), p1.Int("fence"))
	p3 := w.replica(1).Do(http.MethodPost, "/semaphores/ba", nil, testkit.PermitBody("p3", 1, 60000, 0))
	assert.Equal(t, http.StatusConflict, p3.Status, "%s", p3.Body)
	assert.Equal(t, "urn:leasegate:problem:semaphore-full", p3.Str("type"))
	st := w.semState("ba")
	assert.Equal(t, int64(1), st.Int("used"))
	assert.Equal(t, []string{"p2"}, w.permitHolders("ba"))
}

// testTryAcquire: a permit is taken; a try fails at once; another thread releases 500 ms later and
// a try waiting 1 s gets it then. Here the waiter's grant happens inside the release: its fence
// lies between the Redis clock read before the release and the one read after it.
func TestRedissonSemaphoreTryAcquire(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	p1 := w.tryPermit(t, w.replica(0), "ta", "p1", 1, 60000)
	try := w.replica(1).Do(http.MethodPost, "/semaphores/ta", nil, testkit.PermitBody("p3", 1, 60000, 0))
	assert.Equal(t, http.StatusConflict, try.Status, "%s", try.Body)
	assert.Equal(t, "urn:leasegate:problem:semaphore-full", try.Str("type"))
	assert.Nil(t, try.JSON()["waited_ms"], "a try does not wait")

	p2 := postPermit(w.replica(1), "ta", testkit.PermitBody("p2", 1, 60000, 5000))
	w.awaitSemWaiters(t, "ta", 1)
	before := w.redisClockUs(t)
	w.givePermitBack(t, w.replica(0), "ta", p1.Str("token"))
	after := w.redisClockUs(t)
	got := w.response(t, p2, "p2's wait")
	require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
	assert.GreaterOrEqual(t, got.Int("fence"), before)
	assert.LessOrEqual(t, got.Int("fence"), after, "granted by the release itself")
	assert.Equal(t, int64(1), w.semState("ta").Int("used"))
}

// testReleaseWithoutPermits: releasing an unknown permit id of a semaphore never created fails.
// Here every such release (garbage, missing, a lock's or another semaphore's token) is a 400, as
// is a renewal, and nothing of the semaphore appears in Redis.
func TestRedissonSemaphoreReleaseWithoutPermits(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the Redis keyspace")
	w := newRedissonWorld(t)
	lock := w.tryLock(t, w.replica(0), "x", "a", 60000)
	other := w.tryPermit(t, w.replica(0), "y", "a", 1, 60000)
	for _, tc := range []struct{ what, token string }{
		{"a garbage token", "1234"},
		{"no token", ""},
		{"a lock's token", lock.Str("token")},
		{"another semaphore's token", other.Str("token")},
	} {
		r := deleteWith(w.replica(1), "/semaphores/x", tc.token)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.what, r.Body)
		assert.Equal(t, "urn:leasegate:problem:invalid-lease-token", r.Str("type"), tc.what)
		if tc.token != "" {
			r = w.replica(1).Do(http.MethodPost, "/semaphores/x/renew", testkit.TokenHeader(tc.token), "")
			assert.Equal(t, http.StatusBadRequest, r.Status, "renew with %s: %s", tc.what, r.Body)
		}
	}
	assert.Empty(t, w.Redis.MustDo(t, "KEYS", w.Gateway.KeyPrefix+"{x}:sem*"), "no key of semaphore x")
	st := w.semState("x")
	assert.Equal(t, int64(0), st.Int("used"))
	assert.Equal(t, int64(0), st.Int("permits"))
}

// testReleaseExpired: a permit with a 100 ms lease cannot be released 200 ms later. Here its
// release answers 410 and credits nothing: the size-1 semaphore then takes exactly one permit.
func TestRedissonSemaphoreReleaseExpired(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	p := w.tryPermit(t, w.replica(0), "re", "p", 1, 100)
	w.awaitRedisClock(t, p.Int("fence")+102_000, "the permit's lease to run out")
	gone := deleteWith(w.replica(1), "/semaphores/re", p.Str("token"))
	assert.Equal(t, http.StatusGone, gone.Status, "%s", gone.Body)
	assert.Equal(t, int64(0), w.semState("re").Int("used"))
	q := w.tryPermit(t, w.replica(0), "re", "q", 1, 60000)
	assert.Equal(t, int64(1), q.Int("used"))
	full := w.replica(1).Do(http.MethodPost, "/semaphores/re", nil, testkit.PermitBody("r", 1, 60000, 0))
	assert.Equal(t, http.StatusConflict, full.Status, "no permit was credited twice: %s", full.Body)
}

// permitWorkout runs workers goroutines that each take one permit of a semaphore of size permits
// rounds times (waiting), through replica (i % replicas), and release it; while holding, each
// checks that GET lists it and counts no more than permits in use. The first permits grants wait,
// holding, until permits holders are in (so the capacity is seen used in full, deterministically:
// nobody else can be granted meanwhile). It returns the most holders seen at once.
func permitWorkout(t *testing.T, w *redissonWorld, name string, permits int64, workers, rounds, replicas int) int64 {
	t.Helper()
	var holding, most, granted atomic.Int64
	var mu sync.Mutex
	fences := map[int64]bool{}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := w.replica(i % replicas)
			for k := range rounds {
				r := c.Do(http.MethodPost, "/semaphores/"+name, nil, testkit.PermitBody(fmt.Sprintf("w%d", i), permits, 30000, 25000))
				if r.Status != http.StatusCreated {
					t.Errorf("worker %d round %d: %d %s", i, k, r.Status, r.Body)
					return
				}
				now := holding.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				if granted.Add(1) <= permits {
					deadline := time.Now().Add(10 * time.Second)
					for holding.Load() < permits && time.Now().Before(deadline) {
						<-time.After(2 * time.Millisecond) // polling pace
					}
					if holding.Load() < permits {
						t.Errorf("worker %d: the first %d grants never held together", i, permits)
					}
				}
				mu.Lock()
				if fences[r.Int("fence")] {
					t.Errorf("fence %d granted twice", r.Int("fence"))
				}
				fences[r.Int("fence")] = true
				mu.Unlock()
				st := c.Do(http.MethodGet, "/semaphores/"+name, testkit.TokenHeader(r.Str("token")), "")
				if st.JSON()["yours"] != true || st.Int("used") > permits || st.Int("permits") != permits {
					t.Errorf("worker %d round %d: GET while holding: %s", i, k, st.Body)
				}
				holding.Add(-1)
				rel := c.Do(http.MethodDelete, "/semaphores/"+name, testkit.TokenHeader(r.Str("token")), "")
				if rel.Status != http.StatusOK || rel.JSON()["released"] != true {
					t.Errorf("worker %d round %d release: %d %s", i, k, rel.Status, rel.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Len(t, fences, workers*rounds)
	st := w.semState(name)
	assert.Equal(t, int64(0), st.Int("used"))
	assert.Equal(t, int64(0), st.Int("waiters"))
	return most.Load()
}

// testConcurrency_SingleInstance: 100 jobs on one client acquire a semaphore of 1, increment a
// plain counter and release; the counter ends at 100 (a size-1 semaphore is a mutex). Here on one
// replica: never two holders at once.
func TestRedissonSemaphoreConcurrencySingleInstance(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	assert.Equal(t, int64(1), permitWorkout(t, w, "c1", 1, 100, 1, 1), "never two holders of a semaphore of 1")
}

// testConcurrencyLoop_MultiInstance: 16 clients loop 100 times over a semaphore of 1; the counter
// ends at 1600. Here 16 owners on alternating replicas loop 8 times over a semaphore of 1, and
// again over a semaphore of 3, whose three permits are all used at once and never exceeded.
func TestRedissonSemaphoreConcurrencyLoopMultiInstance(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	assert.Equal(t, int64(1), permitWorkout(t, w, "one", 1, 16, 8, 2), "never two holders of a semaphore of 1")
	assert.Equal(t, int64(3), permitWorkout(t, w, "three", 3, 16, 8, 2), "at most, and at some point exactly, 3 holders")
}

// testRelease (and testBlockingAcquireMany, testTryAcquireMany): 6 permits of 10 are taken;
// releasing 4 leaves 8 available, releasing the other 2 leaves 10; releasing them again fails.
// Here one owner per permit.
func TestRedissonSemaphoreRelease(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	var tokens []string
	for i := range 6 {
		p := w.tryPermit(t, w.replica(i), "rl", fmt.Sprintf("p%d", i), 10, 60000)
		assert.Equal(t, int64(i+1), p.Int("used"))
		tokens = append(tokens, p.Str("token"))
	}
	st := w.semState("rl")
	assert.Equal(t, int64(10), st.Int("permits"))
	assert.Equal(t, int64(6), st.Int("used"))
	assert.Equal(t, int64(6), st.Int("holder_count"))
	for i, tok := range tokens[:4] {
		w.givePermitBack(t, w.replica(i), "rl", tok)
	}
	assert.Equal(t, int64(2), w.semState("rl").Int("used"))
	for i, tok := range tokens[4:] {
		w.givePermitBack(t, w.replica(i), "rl", tok)
	}
	assert.Equal(t, int64(0), w.semState("rl").Int("used"))
	for i, tok := range tokens {
		gone := deleteWith(w.replica(i), "/semaphores/rl", tok)
		assert.Equal(t, http.StatusGone, gone.Status, "permit %d again: %s", i, gone.Body)
	}
	assert.Equal(t, int64(0), w.semState("rl").Int("used"))
}

// testReleaseManyExpiredDoesNotThrow: 6 permits of 10 with a 100 ms lease run out; a new permit
// (100 ms) leaves 9 available; soon after all 10 are. Here the new grant counts itself alone.
func TestRedissonSemaphoreReleaseManyExpiredDoesNotThrow(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	var last int64
	for i := range 6 {
		last = w.tryPermit(t, w.replica(i), "rme", fmt.Sprintf("p%d", i), 10, 100).Int("fence")
	}
	w.awaitRedisClock(t, last+102_000, "the six leases to run out")
	p7 := w.tryPermit(t, w.replica(1), "rme", "p7", 10, 100)
	assert.Equal(t, int64(1), p7.Int("used"), "expired permits are not counted")
	harness.Eventually(t, 5*time.Second, "the new permit's lease to run out", func() bool { return w.semState("rme").Int("used") == 0 })
}

// testTryReleaseManyExpired: 3 permits with a 100 ms lease and 3 permanent ones of 10; after the
// short leases run out, releasing the permanent ones frees 3, releasing the expired ones frees
// nothing, and no more than 10 are ever available. Here: the expired releases answer 410, and
// afterwards exactly 10 permits can be taken, not 11.
func TestRedissonSemaphoreTryReleaseManyExpired(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	var short, long []string
	var last int64
	for i := range 3 {
		p := w.tryPermit(t, w.replica(i), "trme", fmt.Sprintf("short%d", i), 10, 100)
		short, last = append(short, p.Str("token")), p.Int("fence")
		long = append(long, w.tryPermit(t, w.replica(i), "trme", fmt.Sprintf("long%d", i), 10, 60000).Str("token"))
	}
	w.awaitRedisClock(t, last+102_000, "the short leases to run out")
	assert.Equal(t, []string{"long0", "long1", "long2"}, w.permitHolders("trme"))
	for i, tok := range long {
		w.givePermitBack(t, w.replica(i), "trme", tok)
	}
	assert.Equal(t, int64(0), w.semState("trme").Int("used"))
	for i, tok := range short {
		gone := deleteWith(w.replica(i), "/semaphores/trme", tok)
		assert.Equal(t, http.StatusGone, gone.Status, "expired permit %d: %s", i, gone.Body)
	}
	assert.Equal(t, int64(0), w.semState("trme").Int("used"))
	for i := range 10 {
		p := w.tryPermit(t, w.replica(i), "trme", fmt.Sprintf("n%d", i), 10, 60000)
		assert.Equal(t, int64(i+1), p.Int("used"))
	}
	full := w.replica(0).Do(http.MethodPost, "/semaphores/trme", nil, testkit.PermitBody("n10", 10, 60000, 0))
	assert.Equal(t, http.StatusConflict, full.Status, "never more than 10: %s", full.Body)
	assert.Equal(t, "urn:leasegate:problem:semaphore-full", full.Str("type"))
}

// testReleaseManyNotExistOrExpired: 2 timed (100 ms) and 8 permanent permits of 10; 2 permanent are
// released; batch releases naming expired, released or unknown ids fail and release nothing. Our
// releases take one token each (no batches), so each failing release is checked on its own: a
// released permit's or an expired permit's token answers 410, a forged one or a lock's 400, and
// none of them changes the permits in use or their holders.
func TestRedissonSemaphoreReleaseManyNotExistOrExpired(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	var timed, permanent []string
	var last int64
	for i := range 2 {
		p := w.tryPermit(t, w.replica(i), "rmne", fmt.Sprintf("timed%d", i), 10, 100)
		timed, last = append(timed, p.Str("token")), p.Int("fence")
	}
	var owners []string
	for i := range 8 {
		permanent = append(permanent, w.tryPermit(t, w.replica(i), "rmne", fmt.Sprintf("perm%d", i), 10, 60000).Str("token"))
		if i >= 2 {
			owners = append(owners, fmt.Sprintf("perm%d", i))
		}
	}
	for i, tok := range permanent[:2] {
		w.givePermitBack(t, w.replica(i), "rmne", tok)
	}
	w.awaitRedisClock(t, last+102_000, "the timed leases to run out")
	assert.Equal(t, int64(6), w.semState("rmne").Int("used"))
	lock := w.tryLock(t, w.replica(0), "rmne", "a", 60000)

	for _, tc := range []struct {
		what, token string
		status      int
	}{
		{"a released permit", permanent[0], http.StatusGone},
		{"an expired permit", timed[0], http.StatusGone},
		{"a forged token", harness.AlterSignature(permanent[2]), http.StatusBadRequest},
		{"a lock's token", lock.Str("token"), http.StatusBadRequest},
	} {
		r := deleteWith(w.replica(1), "/semaphores/rmne", tc.token)
		assert.Equal(t, tc.status, r.Status, "%s: %s", tc.what, r.Body)
		assert.Equal(t, int64(6), w.semState("rmne").Int("used"), tc.what)
		assert.Equal(t, owners, w.permitHolders("rmne"), tc.what)
	}
}

// testGetLeaseTime: the lease time of an unknown permit fails; a permanent permit's is -1; a 1100 ms
// permit has at most 1000 ms left 100 ms later and is free within its lease. Here: an unknown
// (released) token is not yours; a watchdog permit, the closest to a permanent one, shows watchdog
// and how long it will be renewed; a 1000 ms permit shows at most 900 ms left 100 ms (Redis clock)
// after its grant, and then runs out.
func TestRedissonSemaphoreGetLeaseTime(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	wd := w.replica(0).Do(http.MethodPost, "/semaphores/glt", nil, `{"owner":"wd","permits":1,"ttl_ms":600,"watchdog":true,"max_hold_ms":60000}`)
	require.Equal(t, http.StatusCreated, wd.Status, "%s", wd.Body)
	st := w.replica(1).Do(http.MethodGet, "/semaphores/glt", testkit.TokenHeader(wd.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"])
	h := st.JSON()["holders"].([]any)[0].(map[string]any)
	assert.Equal(t, true, h["watchdog"])
	assert.Greater(t, jsonInt(h["max_hold_left_ms"]), int64(50000))
	assert.Equal(t, jsonInt(h["max_hold_left_ms"]), jsonInt(h["max_hold_ms"]), "the deprecated name carries the same number")
	w.givePermitBack(t, w.replica(1), "glt", wd.Str("token"))
	st = w.replica(1).Do(http.MethodGet, "/semaphores/glt", testkit.TokenHeader(wd.Str("token")), "")
	assert.Equal(t, false, st.JSON()["yours"], "a released permit is nobody's")

	p := w.tryPermit(t, w.replica(0), "glt", "p", 1, 1000)
	w.awaitRedisClock(t, p.Int("fence")+100_000, "100 ms of the permit's lease")
	st = w.replica(1).Do(http.MethodGet, "/semaphores/glt", testkit.TokenHeader(p.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"])
	holders := st.JSON()["holders"].([]any)
	require.Len(t, holders, 1)
	left := jsonInt(holders[0].(map[string]any)["ttl_ms"])
	assert.LessOrEqual(t, left, int64(900))
	assert.Equal(t, false, holders[0].(map[string]any)["watchdog"])
	harness.Eventually(t, 5*time.Second, "the permit's lease to run out", func() bool { return w.semState("glt").Int("used") == 0 })
}

// testConcurrencyMultiPermits2 (adapted): in Redisson, T1 wants 1 permit and T2 then 2 of a
// semaphore of 2, and both get theirs within their wait. With one permit per request the
// invariant is that waiters are served in order as permits free up: A and B hold both permits; C
// waits, then D; A's release goes to C (not D), B's to D.
func TestRedissonSemaphoreConcurrencyMultiPermits2(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	a := w.tryPermit(t, w.replica(0), "mp", "a", 2, 60000)
	b := w.tryPermit(t, w.replica(1), "mp", "b", 2, 60000)
	c := postPermit(w.replica(0), "mp", testkit.PermitBody("c", 2, 60000, 10000))
	w.awaitSemWaiters(t, "mp", 1)
	d := postPermit(w.replica(1), "mp", testkit.PermitBody("d", 2, 60000, 10000))
	w.awaitSemWaiters(t, "mp", 2)

	w.givePermitBack(t, w.replica(1), "mp", a.Str("token"))
	gotC := w.response(t, c, "c's wait")
	require.Equal(t, http.StatusCreated, gotC.Status, "%s", gotC.Body)
	assert.Equal(t, int64(1), w.semState("mp").Int("waiters"), "d still waits")
	assert.Equal(t, []string{"b", "c"}, w.permitHolders("mp"))
	select {
	case r := <-d:
		t.Fatalf("d answered %d while both permits were taken: %s", r.Status, r.Body)
	default:
	}

	w.givePermitBack(t, w.replica(0), "mp", b.Str("token"))
	gotD := w.response(t, d, "d's wait")
	require.Equal(t, http.StatusCreated, gotD.Status, "%s", gotD.Body)
	assert.Greater(t, gotD.Int("fence"), gotC.Int("fence"))
	st := w.semState("mp")
	assert.Equal(t, int64(0), st.Int("waiters"))
	assert.Equal(t, int64(2), st.Int("used"))
}
