package sharedlocks

// Redisson's RedissonReadWriteLockTest, ported to HTTP ("mode": "shared" is Redisson's read lock,
// the default exclusive mode its write lock). Redisson's "thread" is a lease here: the same thread
// is a request carrying the lease's Lease-Token, another thread is another owner (no token, or a
// token of its own). Where two clients take part they use the two replicas of a redissonWorld.
// Redisson's seconds are scaled to hundreds of milliseconds.
//
// Times are read from the Redis clock, not the test's: a fence is the Redis time in µs at its grant
// (or the last fence + 1, which the gaps here never need), so "granted no earlier than X's expiry"
// is fence(later) - fence(X) >= X's TTL, whatever the load on the machine.
//
// Java tests already covered exactly by scenario tests elsewhere (not repeated here):
//   - testReadLockIsLocked (a writer takes the read lock too; the read side shows it while the
//     lock stays exclusive): TestDowngrade, rwlock_test.go.
//   - testWR and testInCluster (write, read, read unlock, write unlock, per-mode releases):
//     TestReleaseModeIsExplicit, rwlock_test.go.
//   - testReadLockLeaseTimeoutDiffThreadsWRR (a writer's lease runs out; every reader waiting for
//     it is admitted together): TestWriterExpiryAdmitsTheWaitingReaders, rwlock_test.go.
//   - testAutoExpire (a watchdog write lock of a client that goes away lapses): our watchdog is the
//     gateway's, bounded by max_hold_ms; TestWatchdogStopsAtMaxHold, tests/locks/watchdog_test.go.
// Not applicable: testMultiInstanceZombieReadLockPerformance (disabled upstream, a timing log only).
// testForceUnlock has no counterpart (there is no force unlock); only its "a mode-qualified release
// never touches the other mode" part is ported, as TestRedissonRWForceUnlock.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
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

// redisClockUs is the Redis server's clock in µs, the clock fences and expiries are taken from.
func (w *redissonWorld) redisClockUs(t *testing.T) int64 {
	t.Helper()
	sec, usec, ok := strings.Cut(w.Redis.MustDo(t, "TIME"), "\n")
	require.True(t, ok, "TIME reply")
	s, err := strconv.ParseInt(sec, 10, 64)
	require.NoError(t, err)
	u, err := strconv.ParseInt(usec, 10, 64)
	require.NoError(t, err)
	return s*1_000_000 + u
}

// awaitRedisClock polls until the Redis clock reaches us (µs).
func (w *redissonWorld) awaitRedisClock(t *testing.T, us int64, what string) {
	t.Helper()
	harness.Eventually(t, 10*time.Second, what, func() bool { return w.redisClockUs(t) >= us })
}

// trySharedLock is a try-once shared acquire that must succeed.
func (w *redissonWorld) trySharedLock(t *testing.T, c *harness.Client, lock, owner string, ttlMs int64) *harness.Response {
	t.Helper()
	r := c.Do(http.MethodPost, "/locks/"+lock, nil, testkit.SharedBody(owner, ttlMs, 0))
	require.Equal(t, http.StatusCreated, r.Status, "%s takes %q shared: %s", owner, lock, r.Body)
	require.Equal(t, "shared", r.Str("mode"))
	return r
}

// deleteWith sends DELETE path with token (no token when empty) through c and returns the answer.
func deleteWith(c *harness.Client, path, token string) *harness.Response {
	var h harness.Headers
	if token != "" {
		h = testkit.TokenHeader(token)
	}
	return c.Do(http.MethodDelete, path, h, "")
}

// sharedHolder returns the shared holder entry of owner in a GET answer (nil when absent).
func sharedHolder(st *harness.Response, owner string) map[string]any {
	holders, _ := st.JSON()["holders"].([]any)
	for _, h := range holders {
		if m := h.(map[string]any); m["owner"] == owner {
			return m
		}
	}
	return nil
}

// jsonInt reads a JSON number of a decoded answer (-1 when absent).
func jsonInt(v any) int64 {
	n, ok := v.(json.Number)
	if !ok {
		return -1
	}
	i, _ := n.Int64()
	return i
}

// testReadLockExpiration: T1 reads (lease 10 s) for 9.1 s; T2 reads (lease 3 s) for 2.8 s; T3's
// write lock, asked meanwhile, is granted only after T1 unlocks. Here: A (ttl 10000) and B (ttl 300)
// read; W waits to write; B releases early and its lease would have run out by now, yet A alone
// keeps W out; A's release hands the lock to W in the release itself (W's fence is from before A's
// lease would have run out).
func TestRedissonRWReadLockExpiration(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	a := w.trySharedLock(t, w.replica(0), "rl", "a", 10000)
	b := w.trySharedLock(t, w.replica(1), "rl", "b", 300)
	writer := w.waitLock(w.replica(0), "rl", "w", 60000, 10000)
	w.awaitWaiters(t, "rl", 1)

	rel := deleteWith(w.replica(1), "/locks/rl", b.Str("token"))
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, true, rel.JSON()["released"])
	w.awaitRedisClock(t, b.Int("fence")+400_000, "b's lease to have run out had it not released")
	st := w.state("rl")
	assert.Equal(t, []string{"a"}, w.sharedOwners("rl"), "a still reads")
	assert.Equal(t, int64(1), st.Int("waiters"), "the writer still waits for a")
	select {
	case r := <-writer:
		t.Fatalf("the writer answered %d while a read: %s", r.Status, r.Body)
	default:
	}

	w.unlock(t, w.replica(0), "rl", a.Str("token"))
	got := w.response(t, writer, "the writer")
	require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
	assert.Greater(t, got.Int("fence"), a.Int("fence"))
	assert.Less(t, got.Int("fence"), a.Int("fence")+10_000_000, "granted by a's release, not by a's expiry")
}

// testReadLockExpirationRenewal: 50 jobs take the read lock with the watchdog and hold it for the
// watchdog timeout + 5 s, then unlock without error. Here: 50 watchdog readers (ttl 600) on two
// replicas are all still held 1200 ms (two TTLs, Redis clock) after the last grant, and each
// release answers 200 released (no 410).
func TestRedissonRWReadLockExpirationRenewal(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	const n = 50
	answers := make([]<-chan *harness.Response, n)
	for i := range n {
		answers[i] = post(w.replica(i), "renew", fmt.Sprintf(`{"owner":"r%02d","ttl_ms":600,"mode":"shared","watchdog":true}`, i))
	}
	tokens := make([]string, n)
	var last int64
	for i, ch := range answers {
		r := w.response(t, ch, "a watchdog reader")
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		tokens[i] = r.Str("token")
		last = max(last, r.Int("fence"))
	}
	for w.redisClockUs(t) < last+1_200_000 {
		st := w.state("renew")
		require.Equal(t, int64(n), st.Int("holder_count"), "every watchdog reader is still held: %s", st.Body)
		<-time.After(50 * time.Millisecond) // polling pace
	}
	for i, tok := range tokens {
		w.unlock(t, w.replica(i), "renew", tok)
	}
	assert.Equal(t, false, w.state("renew").JSON()["held"])
}

// testName: ten threads lock and unlock the read lock of "{test}:abc:key" ten times each. Lock
// names here cannot hold braces (they are the Redis hash tag), so the name is "test:abc:key". Every
// acquire and release succeeds, the lock ends free and leaves nothing of its own in Redis: only the
// fence floor every lock of the Redis shares.
func TestRedissonRWName(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the Redis keyspace")
	w := newRedissonWorld(t)
	const lock = "test:abc:key"
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := w.replica(i)
			for k := range 10 {
				r := c.Do(http.MethodPost, "/locks/"+lock, nil, testkit.SharedBody(fmt.Sprintf("t%d", i), 30000, 5000))
				if r.Status != http.StatusCreated {
					t.Errorf("thread %d round %d: %d %s", i, k, r.Status, r.Body)
					return
				}
				rel := deleteWith(c, "/locks/"+lock, r.Str("token"))
				if rel.Status != http.StatusOK || rel.JSON()["released"] != true {
					t.Errorf("thread %d round %d release: %d %s", i, k, rel.Status, rel.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := w.state(lock)
	assert.Equal(t, false, st.JSON()["held"])
	assert.Equal(t, int64(0), st.Int("waiters"))
	harness.Eventually(t, 5*time.Second, "only the fence floor left", func() bool {
		return w.Redis.MustDo(t, "KEYS", w.Gateway.KeyPrefix+"*") == w.Gateway.KeyPrefix+"fence"
	})
}

// testWriteLockExpiration: the writer re-enters with a 1 s lease; in Redisson that adds 1 s to its
// lease, so another thread's 3 s wait fails. leasegate's re-entry resets the TTL to the new ttl_ms
// (it does not add), for either mode, so here the same steps pin that rule: the lease re-entered
// with 300 ms runs out 300 ms later and another owner's wait is granted then, long before the first
// grant's 5 s.
func TestRedissonRWWriteLockExpiration(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	for _, mode := range []string{"exclusive", "shared"} {
		lock := "wle-" + mode
		body := func(ttl int64) string {
			return fmt.Sprintf(`{"owner":"o","ttl_ms":%d,"mode":%q}`, ttl, mode)
		}
		first := w.replica(0).Do(http.MethodPost, "/locks/"+lock, nil, body(5000))
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		again := w.replica(1).Do(http.MethodPost, "/locks/"+lock, testkit.TokenHeader(first.Str("token")), body(300))
		require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
		assert.Equal(t, int64(2), again.Int("holds"), mode)
		assert.Equal(t, int64(300), again.Int("ttl_ms"), mode)
		st := w.replica(0).Do(http.MethodGet, "/locks/"+lock, testkit.TokenHeader(first.Str("token")), "")
		left := st.Int("ttl_ms")
		if mode == "shared" {
			left = jsonInt(sharedHolder(st, "o")["ttl_ms"])
		}
		assert.LessOrEqual(t, left, int64(300), "%s re-entry reset the TTL: %s", mode, st.Body)

		other := w.response(t, w.waitLock(w.replica(1), lock, "other", 60000, 4000), "the other owner's wait")
		require.Equal(t, http.StatusCreated, other.Status, "%s: %s", mode, other.Body)
		assert.GreaterOrEqual(t, other.Int("fence"), first.Int("fence")+299_000, "%s: not before the re-entered lease ran out", mode)
		assert.Less(t, other.Int("fence"), first.Int("fence")+5_000_000, "%s: granted before the first grant's 5 s", mode)
		gone := deleteWith(w.replica(0), "/locks/"+lock, first.Str("token"))
		assert.Equal(t, http.StatusGone, gone.Status, "%s: %s", mode, gone.Body)
		w.unlock(t, w.replica(1), lock, other.Str("token"))
	}
}

// testReadLockLeaseTimeoutDiffThreadsRRW: R1 reads (lease 10 s) and never unlocks; 5 s later R2
// reads (lease 10 s) and unlocks at once; a writer asking then is granted within 6 s, at R1's
// expiry, not R2's. Here: R1 ttl 1000; once half of it has passed R2 reads with ttl 60000 and
// releases; W (waiting at most 5 s) is granted at R1's expiry.
func TestRedissonRWReadLockLeaseTimeoutDiffThreadsRRW(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r1 := w.trySharedLock(t, w.replica(0), "rrw", "r1", 1000)
	w.awaitRedisClock(t, r1.Int("fence")+500_000, "half of r1's lease")
	r2 := w.trySharedLock(t, w.replica(1), "rrw", "r2", 60000)
	w.unlock(t, w.replica(1), "rrw", r2.Str("token"))

	got := w.response(t, w.waitLock(w.replica(0), "rrw", "w", 60000, 5000), "the writer")
	require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
	assert.GreaterOrEqual(t, got.Int("fence"), r1.Int("fence")+999_000, "not before r1's lease ran out")
	assert.Less(t, got.Int("fence"), r2.Int("fence")+60_000_000, "r2's released lease kept nobody out")
}

// testReadLockLeaseTimeout: R1 reads (lease 4 s); 3 s later R2 reads (lease 4 s) and unlocks; 2 s
// later a try-once write lock succeeds. Pure TTL bookkeeping, no waiting: R2's release must not
// leave the lock alive for R2's lease (60 s here).
func TestRedissonRWReadLockLeaseTimeout(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r1 := w.trySharedLock(t, w.replica(0), "rlt", "r1", 500)
	w.awaitRedisClock(t, r1.Int("fence")+350_000, "most of r1's lease")
	r2 := w.trySharedLock(t, w.replica(1), "rlt", "r2", 60000)
	w.unlock(t, w.replica(1), "rlt", r2.Str("token"))
	w.awaitRedisClock(t, r1.Int("fence")+502_000, "r1's lease to run out")

	x := w.tryLock(t, w.replica(0), "rlt", "w", 60000)
	assert.Less(t, x.Int("fence"), r2.Int("fence")+60_000_000, "granted while r2's lease would still have run")
}

// testWriteRead: a writer holds; 20 readers block on the read lock, each to hold it 800 ms; the
// writer unlocks and all 20 are done within 1 s, so they all started within 200 ms. Here the
// writer's release grants all 20 queued readers (their fences, Redis time, lie within 200 ms; one
// hand-off grants them within the same millisecond), they are listed as holders together, and
// each release answers released.
func TestRedissonRWWriteRead(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	const n = 20
	x := w.tryLock(t, w.replica(0), "wr", "writer", 60000)
	readers := make([]<-chan *harness.Response, n)
	for i := range n {
		readers[i] = post(w.replica(i), "wr", testkit.SharedBody(fmt.Sprintf("r%02d", i), 60000, 20000))
	}
	w.awaitWaiters(t, "wr", n)

	w.unlock(t, w.replica(1), "wr", x.Str("token"))
	var fences []int64
	tokens := make([]string, n)
	for i, ch := range readers {
		r := w.response(t, ch, fmt.Sprintf("reader %d", i))
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		assert.Greater(t, r.Int("fence"), x.Int("fence"))
		fences = append(fences, r.Int("fence"))
		tokens[i] = r.Str("token")
	}
	assert.Less(t, slices.Max(fences)-slices.Min(fences), int64(200_000), "granted together, by the writer's release")
	st := w.state("wr")
	assert.Equal(t, "shared", st.Str("mode"))
	assert.Equal(t, int64(n), st.Int("holder_count"), "all the readers hold at once")
	assert.Equal(t, int64(0), st.Int("waiters"))
	for i, tok := range tokens {
		w.unlock(t, w.replica(i), "wr", tok)
	}
	assert.Equal(t, false, w.state("wr").JSON()["held"])
}

// testWriteReadReentrancy: the writer takes the read lock too; another thread's read try fails;
// after the write unlock the same thread's write try fails (it only reads now: no upgrade); after
// the read unlock the write try succeeds.
func TestRedissonRWWriteReadReentrancy(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	l := w.tryLock(t, w.replica(0), "wrr", "l", 60000)
	tok := l.Str("token")
	r := w.replica(1).Do(http.MethodPost, "/locks/wrr", testkit.TokenHeader(tok), testkit.SharedBody("l", 60000, 0))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	other := w.replica(1).Do(http.MethodPost, "/locks/wrr", nil, testkit.SharedBody("other", 60000, 0))
	assert.Equal(t, http.StatusConflict, other.Status, "%s", other.Body)
	assert.Equal(t, "urn:leasegate:problem:lock-held", other.Str("type"))

	rel := deleteWith(w.replica(0), "/locks/wrr?mode=exclusive", tok)
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, true, rel.JSON()["released"])
	assert.Equal(t, "shared", w.state("wrr").Str("mode"))
	up := w.replica(1).Do(http.MethodPost, "/locks/wrr", testkit.TokenHeader(tok), exclusiveBody("l", 60000, 0))
	assert.Equal(t, http.StatusConflict, up.Status, "%s", up.Body)
	assert.Equal(t, "urn:leasegate:problem:upgrade-refused", up.Str("type"))
	foreign := w.replica(0).Do(http.MethodPost, "/locks/wrr", nil, exclusiveBody("other", 60000, 0))
	assert.Equal(t, http.StatusConflict, foreign.Status, "%s", foreign.Body)
	assert.Equal(t, []string{"l"}, w.sharedOwners("wrr"), "the refusals changed nothing")

	w.unlock(t, w.replica(1), "wrr", tok)
	x := w.tryLock(t, w.replica(0), "wrr", "l", 60000)
	assert.Greater(t, x.Int("fence"), l.Int("fence"))
}

// testWriteLock: a reentrant writer (two holds) keeps another thread's reads out; after one
// unlock it takes the read lock too and gives back its last write hold; then the other thread's
// read try succeeds, nobody's write try does, and the lock reads as read-locked only.
func TestRedissonRWWriteLock(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	l := w.tryLock(t, w.replica(0), "wl", "main", 60000)
	tok := l.Str("token")
	again := w.replica(1).Do(http.MethodPost, "/locks/wl", testkit.TokenHeader(tok), exclusiveBody("main", 60000, 0))
	require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
	assert.Equal(t, int64(2), again.Int("holds"))
	for range 2 {
		r := w.replica(1).Do(http.MethodPost, "/locks/wl", nil, testkit.SharedBody("other", 60000, 0))
		assert.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	}
	st := w.replica(1).Do(http.MethodGet, "/locks/wl", nil, "")
	assert.Equal(t, "exclusive", st.Str("mode"))
	assert.Equal(t, int64(2), st.Int("holds"))
	assert.Nil(t, st.JSON()["yours"], "a request without a token is nobody's")

	rel := deleteWith(w.replica(0), "/locks/wl", tok)
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, false, rel.JSON()["released"])
	assert.Equal(t, int64(1), rel.Int("holds"))
	r := w.replica(0).Do(http.MethodPost, "/locks/wl", testkit.TokenHeader(tok), testkit.SharedBody("main", 60000, 0))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, l.Int("fence"), r.Int("fence"))
	st = w.state("wl")
	assert.Equal(t, "exclusive", st.Str("mode"), "still write-locked")
	assert.Equal(t, int64(1), st.Int("holds"))
	rel = deleteWith(w.replica(1), "/locks/wl", tok)
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, "exclusive", rel.Str("mode"))
	assert.Equal(t, true, rel.JSON()["released"])

	o := w.trySharedLock(t, w.replica(1), "wl", "other", 60000)
	up := w.replica(0).Do(http.MethodPost, "/locks/wl", testkit.TokenHeader(tok), exclusiveBody("main", 60000, 0))
	assert.Equal(t, "urn:leasegate:problem:upgrade-refused", up.Str("type"), "%s", up.Body)
	foreign := w.replica(1).Do(http.MethodPost, "/locks/wl", nil, exclusiveBody("third", 60000, 0))
	assert.Equal(t, "urn:leasegate:problem:lock-held", foreign.Str("type"), "%s", foreign.Body)
	st = w.state("wl")
	assert.Equal(t, "shared", st.Str("mode"), "not write-locked any more")
	assert.Empty(t, st.Str("owner"))
	assert.Equal(t, []string{"main", "other"}, w.sharedOwners("wl"))
	w.unlock(t, w.replica(0), "wl", tok)
	w.unlock(t, w.replica(1), "wl", o.Str("token"))
	assert.Equal(t, false, w.state("wl").JSON()["held"])
}

// testMultiRead: R1 reads; its own write try fails, and so does anyone's; R2 reads beside it; after
// R1 unlocks the write try still fails while R2 reads; once R2 is gone it succeeds, re-enters, and
// after its release succeeds again. (The forceUnlock of a free lock has no counterpart.)
func TestRedissonRWMultiRead(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r1 := w.trySharedLock(t, w.replica(0), "mr", "r1", 60000)
	up := w.replica(1).Do(http.MethodPost, "/locks/mr", testkit.TokenHeader(r1.Str("token")), exclusiveBody("r1", 60000, 0))
	assert.Equal(t, "urn:leasegate:problem:upgrade-refused", up.Str("type"), "%s", up.Body)
	x := w.replica(1).Do(http.MethodPost, "/locks/mr", nil, exclusiveBody("w", 60000, 0))
	assert.Equal(t, "urn:leasegate:problem:lock-held", x.Str("type"), "%s", x.Body)
	r2 := w.trySharedLock(t, w.replica(1), "mr", "r2", 60000)
	assert.Equal(t, []string{"r1", "r2"}, w.sharedOwners("mr"))

	w.unlock(t, w.replica(0), "mr", r1.Str("token"))
	assert.Equal(t, []string{"r2"}, w.sharedOwners("mr"))
	x = w.replica(0).Do(http.MethodPost, "/locks/mr", nil, exclusiveBody("w", 60000, 0))
	assert.Equal(t, http.StatusConflict, x.Status, "r2 still reads: %s", x.Body)

	w.unlock(t, w.replica(1), "mr", r2.Str("token"))
	x = w.tryLock(t, w.replica(0), "mr", "w", 60000)
	again := w.replica(1).Do(http.MethodPost, "/locks/mr", testkit.TokenHeader(x.Str("token")), exclusiveBody("w", 60000, 0))
	require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
	assert.Equal(t, int64(2), again.Int("holds"))
	rel := deleteWith(w.replica(0), "/locks/mr", x.Str("token"))
	assert.Equal(t, false, rel.JSON()["released"], "%s", rel.Body)
	w.unlock(t, w.replica(1), "mr", x.Str("token"))
	w.tryLock(t, w.replica(0), "mr", "w", 60000)
}

// testForceUnlock (adapted; there is no force unlock): a release naming the mode a lease does not
// hold leaves the lock alone: a reader's DELETE ?mode=exclusive and a writer's DELETE ?mode=shared
// answer 410, and the holds stay as they were.
func TestRedissonRWForceUnlock(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r := w.trySharedLock(t, w.replica(0), "fr", "reader", 60000)
	gone := deleteWith(w.replica(1), "/locks/fr?mode=exclusive", r.Str("token"))
	assert.Equal(t, http.StatusGone, gone.Status, "%s", gone.Body)
	assert.Equal(t, "urn:leasegate:problem:lease-gone", gone.Str("type"))
	st := w.state("fr")
	assert.Equal(t, "shared", st.Str("mode"))
	assert.Equal(t, int64(1), jsonInt(sharedHolder(st, "reader")["holds"]), "the read hold is untouched")

	x := w.tryLock(t, w.replica(0), "fw", "writer", 60000)
	gone = deleteWith(w.replica(1), "/locks/fw?mode=shared", x.Str("token"))
	assert.Equal(t, http.StatusGone, gone.Status, "%s", gone.Body)
	st = w.state("fw")
	assert.Equal(t, "writer", st.Str("owner"), "the write hold is untouched")
	assert.Equal(t, int64(1), st.Int("holds"))

	rel := deleteWith(w.replica(1), "/locks/fr?mode=shared", r.Str("token"))
	assert.Equal(t, true, rel.JSON()["released"], "%s", rel.Body)
	rel = deleteWith(w.replica(1), "/locks/fw?mode=exclusive", x.Str("token"))
	assert.Equal(t, true, rel.JSON()["released"], "%s", rel.Body)
}

// testReadWriteTTL: a watchdog writer takes the read lock too; for 25 s both keep a healthy TTL;
// after the write unlock the read lock keeps it for 25 s more. Here: a watchdog lease (ttl 600)
// holding both ways stays held both ways for 1000 ms (Redis clock; more than a TTL); after its
// exclusive hold is given back the watchdog keeps its shared hold for another 1000 ms.
func TestRedissonRWReadWriteTTL(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	l := w.replica(0).Do(http.MethodPost, "/locks/ttl", nil, `{"owner":"o","ttl_ms":600,"watchdog":true}`)
	require.Equal(t, http.StatusCreated, l.Status, "%s", l.Body)
	tok := l.Str("token")
	r := w.replica(1).Do(http.MethodPost, "/locks/ttl", testkit.TokenHeader(tok), `{"owner":"o","ttl_ms":600,"mode":"shared","watchdog":true}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	until := w.redisClockUs(t) + 1_000_000
	for w.redisClockUs(t) < until {
		st := w.state("ttl")
		require.Equal(t, "exclusive", st.Str("mode"), "%s", st.Body)
		require.Positive(t, st.Int("ttl_ms"), "%s", st.Body)
		require.Positive(t, jsonInt(sharedHolder(st, "o")["ttl_ms"]), "the read hold is renewed too: %s", st.Body)
		<-time.After(50 * time.Millisecond) // polling pace
	}
	rel := deleteWith(w.replica(0), "/locks/ttl?mode=exclusive", tok)
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, true, rel.JSON()["released"])

	until = w.redisClockUs(t) + 1_000_000
	for w.redisClockUs(t) < until {
		st := w.state("ttl")
		require.Equal(t, "shared", st.Str("mode"), "%s", st.Body)
		h := sharedHolder(st, "o")
		require.NotNil(t, h, "the read hold outlives the write hold: %s", st.Body)
		require.Equal(t, true, h["watchdog"])
		<-time.After(50 * time.Millisecond) // polling pace
	}
	w.unlock(t, w.replica(1), "ttl", tok)
	assert.Equal(t, false, w.state("ttl").JSON()["held"])
}

// testExpireRead: R1 reads with a 2 s lease; another thread's blocking read lock is granted at once
// (not after R1's lease, 10 s here); both unlock without error.
func TestRedissonRWExpireRead(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r1 := w.trySharedLock(t, w.replica(0), "er", "r1", 10000)
	r2 := w.response(t, post(w.replica(1), "er", testkit.SharedBody("r2", 10000, 5000)), "r2")
	require.Equal(t, http.StatusCreated, r2.Status, "%s", r2.Body)
	assert.Less(t, r2.Int("fence"), r1.Int("fence")+10_000_000, "a reader never waits for a reader")
	assert.Equal(t, []string{"r1", "r2"}, w.sharedOwners("er"))
	w.unlock(t, w.replica(1), "er", r2.Str("token"))
	w.unlock(t, w.replica(0), "er", r1.Str("token"))
}

// testExpireWrite: W1 writes with a 2 s lease; another thread's blocking write lock is granted when
// it runs out; W1's unlock then fails. Here with 400 ms: W2's grant comes no earlier than W1's
// expiry, W1's release answers 410, and W2 still holds.
func TestRedissonRWExpireWrite(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	w1 := w.tryLock(t, w.replica(0), "ew", "w1", 400)
	w2 := w.response(t, w.waitLock(w.replica(1), "ew", "w2", 60000, 5000), "w2")
	require.Equal(t, http.StatusCreated, w2.Status, "%s", w2.Body)
	assert.GreaterOrEqual(t, w2.Int("fence"), w1.Int("fence")+399_000, "not before w1's lease ran out")
	gone := deleteWith(w.replica(0), "/locks/ew", w1.Str("token"))
	assert.Equal(t, http.StatusGone, gone.Status, "%s", gone.Body)
	st := w.state("ew")
	assert.Equal(t, "w2", st.Str("owner"), "w1's stale release did not touch w2")
	assert.Equal(t, w2.Int("fence"), st.Int("fence"))
	w.unlock(t, w.replica(1), "ew", w2.Str("token"))
}

// testHoldCount (and testReentrancy): for the read lock, then the write lock: 0 holds; lock, 1;
// unlock, 0; lock twice, 2; unlock, 1; unlock, 0. testReentrancy adds: while the read lock is held
// twice, another thread locks another name. Here with the release answers, GET and a final 410.
func TestRedissonRWHoldCount(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	for _, mode := range []string{"shared", "exclusive"} {
		lock := "hc-" + mode
		body := fmt.Sprintf(`{"owner":"o","ttl_ms":60000,"mode":%q}`, mode)
		holds := func() int64 {
			st := w.state(lock)
			if mode == "shared" {
				if h := sharedHolder(st, "o"); h != nil {
					return jsonInt(h["holds"])
				}
				return 0
			}
			return max(st.Int("holds"), 0)
		}
		assert.Equal(t, int64(0), holds(), mode)
		r := w.replica(0).Do(http.MethodPost, "/locks/"+lock, nil, body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		assert.Equal(t, int64(1), r.Int("holds"), mode)
		assert.Equal(t, int64(1), holds(), mode)
		rel := deleteWith(w.replica(1), "/locks/"+lock, r.Str("token"))
		assert.Equal(t, true, rel.JSON()["released"], "%s: %s", mode, rel.Body)
		assert.Equal(t, int64(0), rel.Int("holds"), mode)
		assert.Equal(t, int64(0), holds(), mode)

		r = w.replica(0).Do(http.MethodPost, "/locks/"+lock, nil, body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		tok := r.Str("token")
		r = w.replica(1).Do(http.MethodPost, "/locks/"+lock, testkit.TokenHeader(tok), body)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, int64(2), r.Int("holds"), mode)
		assert.Equal(t, int64(2), holds(), mode)
		if mode == "shared" {
			w.unlock(t, w.replica(1), "lock1", w.tryLock(t, w.replica(1), "lock1", "another-thread", 60000).Str("token"))
		}
		for _, left := range []int64{1, 0} {
			rel := deleteWith(w.replica(int(left)), "/locks/"+lock, tok)
			require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
			assert.Equal(t, left, rel.Int("holds"), mode)
			assert.Equal(t, left == 0, rel.JSON()["released"], mode)
			assert.Equal(t, mode, rel.Str("mode"))
			assert.Equal(t, left, holds(), mode)
		}
		gone := deleteWith(w.replica(0), "/locks/"+lock, tok)
		assert.Equal(t, http.StatusGone, gone.Status, "%s: %s", mode, gone.Body)
	}
}

// testIsHeldByCurrentThread and testIsHeldByCurrentThreadOtherThread: the read lock is held by the
// thread that took it, by no other, and by nobody after its unlock. Here: GET with the reader's
// token says yours (on either replica), with another owner's (finished) lease's token not yours,
// without a token it says nothing; after the release the reader's token is not yours either.
func TestRedissonRWIsHeldByCurrentThread(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	other := w.trySharedLock(t, w.replica(1), "ih", "other", 60000)
	w.unlock(t, w.replica(1), "ih", other.Str("token"))
	yours := func(c *harness.Client, token string) any {
		return c.Do(http.MethodGet, "/locks/ih", testkit.TokenHeader(token), "").JSON()["yours"]
	}

	r := w.trySharedLock(t, w.replica(0), "ih", "main", 60000)
	assert.Equal(t, true, yours(w.replica(0), r.Str("token")))
	assert.Equal(t, true, yours(w.replica(1), r.Str("token")))
	assert.Equal(t, false, yours(w.replica(1), other.Str("token")))
	assert.Nil(t, w.state("ih").JSON()["yours"])

	w.unlock(t, w.replica(0), "ih", r.Str("token"))
	assert.Equal(t, false, yours(w.replica(0), r.Str("token")))
	assert.Equal(t, false, yours(w.replica(1), other.Str("token")))
}

// testIsLocked and testIsLockedOtherThread: the read lock is not locked, then locked (as seen by
// another thread), then not locked after the unlock.
func TestRedissonRWIsLocked(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	get := func() *harness.Response { return w.replica(1).Do(http.MethodGet, "/locks/il", nil, "") }
	assert.Equal(t, false, get().JSON()["held"])
	r := w.trySharedLock(t, w.replica(0), "il", "main", 60000)
	st := get()
	assert.Equal(t, true, st.JSON()["held"])
	assert.Equal(t, "shared", st.Str("mode"))
	assert.Equal(t, int64(1), st.Int("holder_count"))
	w.unlock(t, w.replica(0), "il", r.Str("token"))
	st = get()
	assert.Equal(t, false, st.JSON()["held"])
	assert.Empty(t, st.Str("mode"))
}

// testUnlockFail: another thread reads; the main thread, which holds nothing, unlocks and fails.
// Here every release that is not the reader's fails without touching its hold: no token or a
// forged one (400), another lock's token (400), a finished lease's token (410).
func TestRedissonRWUnlockFail(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r := w.trySharedLock(t, w.replica(0), "uf", "reader", 60000)
	finished := w.trySharedLock(t, w.replica(1), "uf", "main", 60000)
	w.unlock(t, w.replica(1), "uf", finished.Str("token"))
	elsewhere := w.trySharedLock(t, w.replica(1), "uf2", "main", 60000)

	for _, tc := range []struct {
		what, token string
		status      int
		typ         string
	}{
		{"no token", "", http.StatusBadRequest, "urn:leasegate:problem:invalid-lease-token"},
		{"a forged token", harness.AlterSignature(r.Str("token")), http.StatusBadRequest, "urn:leasegate:problem:invalid-lease-token"},
		{"another lock's token", elsewhere.Str("token"), http.StatusBadRequest, "urn:leasegate:problem:invalid-lease-token"},
		{"a finished lease's token", finished.Str("token"), http.StatusGone, "urn:leasegate:problem:lease-gone"},
	} {
		got := deleteWith(w.replica(1), "/locks/uf", tc.token)
		assert.Equal(t, tc.status, got.Status, "%s: %s", tc.what, got.Body)
		assert.Equal(t, tc.typ, got.Str("type"), tc.what)
		st := w.state("uf")
		assert.Equal(t, []string{"reader"}, w.sharedOwners("uf"), tc.what)
		assert.Equal(t, int64(1), jsonInt(sharedHolder(st, "reader")["holds"]), tc.what)
	}
	w.unlock(t, w.replica(0), "uf", r.Str("token"))
}

// testLockUnlock: the read lock is locked and unlocked twice; the second grant's fence is newer.
func TestRedissonRWLockUnlock(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	first := w.trySharedLock(t, w.replica(0), "lu", "main", 60000)
	w.unlock(t, w.replica(0), "lu", first.Str("token"))
	second := w.trySharedLock(t, w.replica(1), "lu", "main", 60000)
	w.unlock(t, w.replica(1), "lu", second.Str("token"))
	assert.Greater(t, second.Int("fence"), first.Int("fence"))
	assert.NotEqual(t, first.Str("token"), second.Str("token"))
}

// rwHoldRecord is one hold recorded while held in an rwMixedWorkout.
type rwHoldRecord struct {
	fence     int64
	exclusive bool
}

// rwMixedWorkout runs workers goroutines that each take lock rounds times, in a mode drawn from a
// seeded generator, through replica (i % replicas), and checks while holding: no writer beside
// anyone (client-side counters taken inside the hold), and GET agreeing with the hold. It then
// checks the fences of the holds in the order they were recorded: a writer's fence is above every
// fence recorded before it, and a reader's above every earlier writer's (holds that never overlap
// were granted in that order).
func rwMixedWorkout(t *testing.T, w *redissonWorld, lock string, workers, rounds, replicas int) {
	t.Helper()
	var readers, writers, violations atomic.Int64
	var mu sync.Mutex
	var entries []rwHoldRecord
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := w.replica(i % replicas)
			rng := rand.New(rand.NewPCG(uint64(i), 0x5eed))
			for k := range rounds {
				exclusive := rng.IntN(2) == 0
				owner := fmt.Sprintf("w%d", i)
				body := testkit.SharedBody(owner, 30000, 25000)
				if exclusive {
					body = exclusiveBody(owner, 30000, 25000)
				}
				r := c.Do(http.MethodPost, "/locks/"+lock, nil, body)
				if r.Status != http.StatusCreated {
					t.Errorf("worker %d round %d: %d %s", i, k, r.Status, r.Body)
					return
				}
				if exclusive {
					if writers.Add(1) != 1 || readers.Load() != 0 {
						violations.Add(1)
					}
				} else if readers.Add(1); writers.Load() != 0 {
					violations.Add(1)
				}
				mu.Lock()
				entries = append(entries, rwHoldRecord{r.Int("fence"), exclusive})
				mu.Unlock()
				st := c.Do(http.MethodGet, "/locks/"+lock, testkit.TokenHeader(r.Str("token")), "")
				if st.JSON()["yours"] != true || (st.Str("mode") == "exclusive") != exclusive ||
					(exclusive && st.Str("owner") != owner) {
					t.Errorf("worker %d round %d (exclusive %v): GET while holding: %s", i, k, exclusive, st.Body)
				}
				if exclusive {
					writers.Add(-1)
				} else {
					readers.Add(-1)
				}
				rel := c.Do(http.MethodDelete, "/locks/"+lock, testkit.TokenHeader(r.Str("token")), "")
				if rel.Status != http.StatusOK || rel.JSON()["released"] != true {
					t.Errorf("worker %d round %d release: %d %s", i, k, rel.Status, rel.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, violations.Load(), "a writer held beside another holder")
	assert.Len(t, entries, workers*rounds)
	var lastWriter, highest int64
	for i, e := range entries {
		if e.exclusive {
			assert.Greater(t, e.fence, highest, "writer hold %d: fence below an earlier hold's", i)
			lastWriter = e.fence
		} else {
			assert.Greater(t, e.fence, lastWriter, "reader hold %d: fence below an earlier writer's", i)
		}
		highest = max(highest, e.fence)
	}
	st := w.state(lock)
	assert.Equal(t, false, st.JSON()["held"])
	assert.Equal(t, int64(0), st.Int("waiters"))
}

// testConcurrency_SingleInstance: 15 jobs on one client each take the read or the write lock at
// random, count, and unlock; all 15 finish. Here on one replica, with the in-hold checks.
func TestRedissonRWConcurrencySingleInstance(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	rwMixedWorkout(t, w, "c1", 15, 1, 1)
}

// testConcurrencyLoop_MultiInstance: 16 clients loop 100 times over a random-mode lock; the counter
// ends at 1600. Here 16 owners on alternating replicas loop 10 times each.
func TestRedissonRWConcurrencyLoopMultiInstance(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	rwMixedWorkout(t, w, "cl", 16, 10, 2)
}

// testConcurrency_MultiInstance: 100 clients each take a random-mode lock once; the counter ends
// at 100. Here 100 owners on alternating replicas, all at once.
func TestRedissonRWConcurrencyMultiInstance(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	rwMixedWorkout(t, w, "cm", 100, 1, 2)
}

// testMultiInstanceReadLockZombieCleanup: instance A reads (watchdog) and dies without unlocking;
// instance B reads (watchdog), holds past the watchdog timeout and unlocks; a write try then
// succeeds. Here A's reader (ttl 400) is never renewed: it is dropped when its lease runs out while
// B's watchdog reader (ttl 600) stays held for 1200 ms (Redis clock); A's token then answers 410,
// and after B's release a try-once writer gets in.
func TestRedissonRWMultiInstanceReadLockZombieCleanup(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	a := w.trySharedLock(t, w.replica(0), "zombie", "a", 400)
	b := w.replica(1).Do(http.MethodPost, "/locks/zombie", nil, `{"owner":"b","ttl_ms":600,"mode":"shared","watchdog":true}`)
	require.Equal(t, http.StatusCreated, b.Status, "%s", b.Body)

	for w.redisClockUs(t) < b.Int("fence")+1_200_000 {
		owners := w.sharedOwners("zombie")
		require.Contains(t, owners, "b", "the live reader stays held")
		<-time.After(50 * time.Millisecond) // polling pace
	}
	assert.Equal(t, []string{"b"}, w.sharedOwners("zombie"), "the dead reader is gone")
	gone := deleteWith(w.replica(0), "/locks/zombie", a.Str("token"))
	assert.Equal(t, http.StatusGone, gone.Status, "%s", gone.Body)
	w.unlock(t, w.replica(1), "zombie", b.Str("token"))
	w.tryLock(t, w.replica(0), "zombie", "writer", 60000)
}
