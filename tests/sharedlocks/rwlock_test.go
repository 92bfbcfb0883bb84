package sharedlocks

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// Read-write locks: "mode": "shared" on the existing locks, across two gateway replicas.

func exclusiveBody(owner string, ttlMs, waitMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d}`, owner, ttlMs, waitMs)
}

// post sends an acquire body for lock through c and returns the answer on a channel.
func post(c *harness.Client, lock, body string) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	go func() { out <- c.Do(http.MethodPost, "/locks/"+lock, nil, body) }()
	return out
}

// owners lists the owners GET /locks/{lock} reports as shared holders.
func (w *redissonWorld) sharedOwners(lock string) []string {
	var out []string
	holders, _ := w.state(lock).JSON()["holders"].([]any)
	for _, h := range holders {
		out = append(out, h.(map[string]any)["owner"].(string))
	}
	slices.Sort(out)
	return out
}

func TestSharedHoldersCoexist(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	const n = 20
	answers := make([]<-chan *harness.Response, n)
	for i := range n {
		answers[i] = post(w.replica(i), "cfg", testkit.SharedBody(fmt.Sprintf("reader-%02d", i), 60000, 0))
	}
	fences := map[int64]bool{}
	for i := range n {
		r := w.response(t, answers[i], "a shared acquire")
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		assert.Equal(t, "shared", r.Str("mode"))
		assert.False(t, fences[r.Int("fence")], "every shared grant has a fence of its own")
		fences[r.Int("fence")] = true
	}
	st := w.state("cfg")
	assert.Equal(t, "shared", st.Str("mode"))
	assert.Equal(t, int64(n), st.Int("holder_count"))
	assert.Len(t, st.JSON()["holders"], n)
	assert.Empty(t, st.Str("owner"), "no exclusive holder's fields")

	r := w.replica(1).Do(http.MethodPost, "/locks/cfg", nil, exclusiveBody("writer", 60000, 0))
	assert.Equal(t, http.StatusConflict, r.Status, "an exclusive try is refused while readers hold")
	assert.Equal(t, "urn:leasegate:problem:lock-held", r.Str("type"))
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
}

func TestExclusiveExcludesShared(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	x := w.tryLock(t, w.replica(0), "db", "writer", 60000)
	assert.Equal(t, "exclusive", x.Str("mode"))
	r := w.replica(1).Do(http.MethodPost, "/locks/db", nil, testkit.SharedBody("reader", 60000, 0))
	require.Equal(t, http.StatusConflict, r.Status)
	w.unlock(t, w.replica(1), "db", x.Str("token"))
	r = w.replica(1).Do(http.MethodPost, "/locks/db", nil, testkit.SharedBody("reader", 60000, 0))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	assert.Greater(t, r.Int("fence"), x.Int("fence"))
}

// TestWriterBehindReadersIsNotStarved: a writer waiting behind readers gets the lock once the
// readers that hold it leave, even while new readers keep arriving: they queue behind it (and a
// reader that only tries gets 409).
func TestWriterBehindReadersIsNotStarved(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	r1 := w.response(t, post(w.replica(0), "doc", testkit.SharedBody("r1", 60000, 0)), "r1")
	r2 := w.response(t, post(w.replica(1), "doc", testkit.SharedBody("r2", 60000, 0)), "r2")
	require.Equal(t, http.StatusCreated, r1.Status)
	require.Equal(t, http.StatusCreated, r2.Status)

	writer := post(w.replica(0), "doc", exclusiveBody("writer", 60000, 20000))
	w.awaitWaiters(t, "doc", 1)
	late := w.replica(1).Do(http.MethodPost, "/locks/doc", nil, testkit.SharedBody("late-try", 60000, 0))
	assert.Equal(t, http.StatusConflict, late.Status, "a try-once reader does not pass a waiting writer")
	lateWaiter := post(w.replica(1), "doc", testkit.SharedBody("late-wait", 60000, 20000))
	w.awaitWaiters(t, "doc", 2)

	w.unlock(t, w.replica(1), "doc", r1.Str("token"))
	assert.Equal(t, []string{"r2"}, w.sharedOwners("doc"), "the lock waits for r2 too")
	w.unlock(t, w.replica(0), "doc", r2.Str("token"))
	wr := w.response(t, writer, "the writer")
	require.Equal(t, http.StatusCreated, wr.Status, "%s", wr.Body)
	assert.Equal(t, "writer", w.state("doc").Str("owner"))

	w.unlock(t, w.replica(0), "doc", wr.Str("token"))
	lw := w.response(t, lateWaiter, "the late reader")
	require.Equal(t, http.StatusCreated, lw.Status, "%s", lw.Body)
	assert.Greater(t, lw.Int("fence"), wr.Int("fence"))
}

// TestReadersAtTheHeadAreGrantedTogether: when a writer releases, every shared waiter at the head
// of the line is granted at once; the writer queued behind them waits, and the reader behind that
// writer waits for it.
func TestReadersAtTheHeadAreGrantedTogether(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	holder := w.tryLock(t, w.replica(0), "page", "holder", 60000)
	var readers []<-chan *harness.Response
	for i := range 3 {
		readers = append(readers, post(w.replica(i), "page", testkit.SharedBody(fmt.Sprintf("r%d", i), 60000, 20000)))
		w.awaitWaiters(t, "page", int64(i+1))
	}
	writer := post(w.replica(1), "page", exclusiveBody("w2", 60000, 20000))
	w.awaitWaiters(t, "page", 4)
	tail := post(w.replica(0), "page", testkit.SharedBody("r-tail", 60000, 20000))
	w.awaitWaiters(t, "page", 5)

	w.unlock(t, w.replica(1), "page", holder.Str("token"))
	var tokens []string
	for i, ch := range readers {
		r := w.response(t, ch, fmt.Sprintf("reader %d", i))
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		assert.Greater(t, r.Int("fence"), holder.Int("fence"))
		tokens = append(tokens, r.Str("token"))
	}
	assert.Equal(t, []string{"r0", "r1", "r2"}, w.sharedOwners("page"))
	assert.Equal(t, int64(2), w.state("page").Int("waiters"), "the writer and the reader behind it still wait")

	for i, tok := range tokens {
		w.unlock(t, w.replica(i), "page", tok)
	}
	wr := w.response(t, writer, "the writer")
	require.Equal(t, http.StatusCreated, wr.Status, "%s", wr.Body)
	assert.Equal(t, int64(1), w.state("page").Int("waiters"))
	w.unlock(t, w.replica(0), "page", wr.Str("token"))
	tr := w.response(t, tail, "the tail reader")
	require.Equal(t, http.StatusCreated, tr.Status, "%s", tr.Body)
	assert.Greater(t, tr.Int("fence"), wr.Int("fence"))
}

// TestOneReaderExpiryDoesNotFreeTheLock: readers expire one by one; the writer waiting behind
// them gets in only when the last one is gone.
func TestOneReaderExpiryDoesNotFreeTheLock(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	short := w.response(t, post(w.replica(0), "idx", testkit.SharedBody("short", 300, 0)), "short")
	long := w.response(t, post(w.replica(1), "idx", testkit.SharedBody("long", 60000, 0)), "long")
	require.Equal(t, http.StatusCreated, short.Status)
	require.Equal(t, http.StatusCreated, long.Status)
	writer := post(w.replica(0), "idx", exclusiveBody("writer", 60000, 20000))
	w.awaitWaiters(t, "idx", 1)

	harness.Eventually(t, 5*time.Second, "the short reader's expiry", func() bool {
		return slices.Equal(w.sharedOwners("idx"), []string{"long"})
	})
	assert.Equal(t, int64(1), w.state("idx").Int("waiters"), "the writer still waits for the long reader")
	r := w.replica(0).Do(http.MethodDelete, "/locks/idx", testkit.TokenHeader(short.Str("token")), "")
	assert.Equal(t, http.StatusGone, r.Status, "the expired reader's token is gone")

	w.unlock(t, w.replica(1), "idx", long.Str("token"))
	wr := w.response(t, writer, "the writer")
	require.Equal(t, http.StatusCreated, wr.Status, "%s", wr.Body)
}

// TestWriterExpiryAdmitsTheWaitingReaders: a writer that never releases expires, and every reader
// waiting for it is granted then.
func TestWriterExpiryAdmitsTheWaitingReaders(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	w.tryLock(t, w.replica(0), "feed", "crashed-writer", 400)
	a := post(w.replica(0), "feed", testkit.SharedBody("a", 60000, 20000))
	b := post(w.replica(1), "feed", testkit.SharedBody("b", 60000, 20000))
	for _, ch := range []<-chan *harness.Response{a, b} {
		r := w.response(t, ch, "a reader")
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	assert.Equal(t, []string{"a", "b"}, w.sharedOwners("feed"))
}

// TestDowngrade: the exclusive holder takes a shared hold with its token; releasing its exclusive
// hold leaves it holding shared, and a writer waiting all along does not get in between.
func TestDowngrade(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	x := w.tryLock(t, w.replica(0), "acct", "owner", 60000)
	writer := post(w.replica(1), "acct", exclusiveBody("writer", 60000, 20000))
	w.awaitWaiters(t, "acct", 1)

	r := w.replica(1).Do(http.MethodPost, "/locks/acct", testkit.TokenHeader(x.Str("token")), testkit.SharedBody("owner", 60000, 0))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, "shared", r.Str("mode"))
	assert.Equal(t, x.Int("fence"), r.Int("fence"), "the same lease, the same fence")
	st := w.state("acct")
	assert.Equal(t, "exclusive", st.Str("mode"), "the lease holds both ways")
	assert.Equal(t, int64(1), st.Int("holder_count"))

	rel := w.replica(0).Do(http.MethodDelete, "/locks/acct", testkit.TokenHeader(x.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, "exclusive", rel.Str("mode"), "a plain release gives back the exclusive hold first")
	assert.Equal(t, true, rel.JSON()["released"])
	st = w.state("acct")
	assert.Equal(t, "shared", st.Str("mode"))
	assert.Equal(t, []string{"owner"}, w.sharedOwners("acct"))
	assert.Equal(t, int64(1), st.Int("waiters"), "the waiting writer did not get in between")

	rel = w.replica(0).Do(http.MethodDelete, "/locks/acct", testkit.TokenHeader(x.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, "shared", rel.Str("mode"))
	wr := w.response(t, writer, "the writer")
	require.Equal(t, http.StatusCreated, wr.Status, "%s", wr.Body)
}

// TestReleaseModeIsExplicit: ?mode= picks which hold of a lease holding both is given back.
func TestReleaseModeIsExplicit(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	x := w.tryLock(t, w.replica(0), "both", "owner", 60000)
	r := w.replica(0).Do(http.MethodPost, "/locks/both", testkit.TokenHeader(x.Str("token")), testkit.SharedBody("owner", 60000, 0))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	rel := w.replica(1).Do(http.MethodDelete, "/locks/both?mode=shared", testkit.TokenHeader(x.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, "shared", rel.Str("mode"))
	st := w.state("both")
	assert.Equal(t, "exclusive", st.Str("mode"))
	assert.Nil(t, st.JSON()["holder_count"], "no shared hold left")
	rel = w.replica(1).Do(http.MethodDelete, "/locks/both?mode=shared", testkit.TokenHeader(x.Str("token")), "")
	assert.Equal(t, http.StatusGone, rel.Status, "no shared hold to give back")
	bad := w.replica(1).Do(http.MethodDelete, "/locks/both?mode=both", testkit.TokenHeader(x.Str("token")), "")
	assert.Equal(t, http.StatusBadRequest, bad.Status)
	assert.Equal(t, "exclusive", w.state("both").Str("mode"), "a bad request changes nothing")
	w.unlock(t, w.replica(0), "both", x.Str("token"))
}

func TestUpgradeRefused(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	s := w.response(t, post(w.replica(0), "up", testkit.SharedBody("reader", 60000, 0)), "reader")
	require.Equal(t, http.StatusCreated, s.Status)
	r := w.replica(1).Do(http.MethodPost, "/locks/up", testkit.TokenHeader(s.Str("token")), exclusiveBody("reader", 60000, 0))
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Equal(t, "urn:leasegate:problem:upgrade-refused", r.Str("type"))
	assert.Contains(t, r.Str("detail"), "deadlock")
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, []string{"reader"}, w.sharedOwners("up"), "nothing changed")
	reenter := w.replica(1).Do(http.MethodPost, "/locks/up", testkit.TokenHeader(s.Str("token")), testkit.SharedBody("reader", 60000, 0))
	require.Equal(t, http.StatusOK, reenter.Status, "%s", reenter.Body)
	assert.Equal(t, int64(2), reenter.Int("holds"), "the same mode re-enters")
}

// TestSharedWatchdogOutlivesItsReplica: a shared watchdog lease keeps being renewed after the
// replica that granted it is killed.
func TestSharedWatchdogOutlivesItsReplica(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	gwA := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	a := harness.NewClient(t, gwA.URL)
	r := a.Do(http.MethodPost, "/locks/wd", nil, `{"owner":"reader","ttl_ms":600,"mode":"shared","watchdog":true}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	require.NoError(t, gwA.Kill())
	testkit.Throughout(t, 2500*time.Millisecond, "the shared watchdog lease is still held", func() bool { // four TTLs
		return e.Client.Do(http.MethodGet, "/locks/wd", nil, "").Int("holder_count") == 1
	})
	rel := e.Client.Do(http.MethodDelete, "/locks/wd", testkit.TokenHeader(r.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, false, e.Client.Do(http.MethodGet, "/locks/wd", nil, "").JSON()["held"])
}

// TestSharedWaiterThatLeavesLeavesTheLine: a shared waiter whose client disconnects leaves the
// queue at once.
func TestSharedWaiterThatLeavesLeavesTheLine(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	x := w.tryLock(t, w.replica(0), "gone", "writer", 60000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.replica(1).Send(ctx, http.MethodPost, "/locks/gone", nil, testkit.SharedBody("leaver", 60000, 20000))
	}()
	w.awaitWaiters(t, "gone", 1)
	cancel()
	<-done
	w.awaitWaiters(t, "gone", 0)
	w.unlock(t, w.replica(0), "gone", x.Str("token"))
	assert.Equal(t, false, w.state("gone").JSON()["held"], "nobody was granted the lock")
}

// TestReadWriteMutualExclusion: workers on two replicas take the lock in random modes and record
// what holds while they hold: never an exclusive holder beside anyone, and fences that grow.
func TestReadWriteMutualExclusion(t *testing.T) {
	t.Parallel()
	w := newRedissonWorld(t)
	const workers, rounds = 8, 15
	var readers, writers atomic.Int64
	var violations atomic.Int64
	var mu sync.Mutex
	var fences []int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := w.replica(i)
			for k := range rounds {
				shared := (i+k)%3 != 0
				body := exclusiveBody(fmt.Sprintf("w%d", i), 10000, 20000)
				if shared {
					body = testkit.SharedBody(fmt.Sprintf("r%d", i), 10000, 20000)
				}
				r := c.Do(http.MethodPost, "/locks/mx", nil, body)
				if r.Status != http.StatusCreated {
					t.Errorf("worker %d: %d %s", i, r.Status, r.Body)
					return
				}
				if shared {
					readers.Add(1)
					if writers.Load() != 0 {
						violations.Add(1)
					}
				} else {
					if writers.Add(1) != 1 || readers.Load() != 0 {
						violations.Add(1)
					}
				}
				mu.Lock()
				fences = append(fences, r.Int("fence"))
				mu.Unlock()
				if shared {
					readers.Add(-1)
				} else {
					writers.Add(-1)
				}
				rel := c.Do(http.MethodDelete, "/locks/mx", testkit.TokenHeader(r.Str("token")), "")
				if rel.Status != http.StatusOK {
					t.Errorf("worker %d release: %d %s", i, rel.Status, rel.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, violations.Load(), "an exclusive holder was never beside another holder")
	assert.Len(t, fences, workers*rounds)
	seen := map[int64]bool{}
	for _, f := range fences {
		assert.False(t, seen[f], "fence %d granted twice", f)
		seen[f] = true
	}
}

// TestSharedWaitersSurviveARedisRestart: Redis restarts without persistence while readers wait
// behind a writer; the writer's lease is lost with the data, and the readers' replicas queue them
// again at their arrival and both are granted, shared, within their wait.
func TestSharedWaitersSurviveARedisRestart(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "restarts the one Redis")
	w := newRedissonWorld(t)
	w.tryLock(t, w.replica(0), "rs", "writer", 60000)
	a := post(w.replica(0), "rs", testkit.SharedBody("a", 60000, 30000))
	w.awaitWaiters(t, "rs", 1)
	b := post(w.replica(1), "rs", testkit.SharedBody("b", 60000, 30000))
	w.awaitWaiters(t, "rs", 2)
	require.NoError(t, w.Redis.Kill())
	require.NoError(t, w.Redis.Restart())
	for _, ch := range []<-chan *harness.Response{a, b} {
		r := w.response(t, ch, "a reader after the restart")
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		assert.Equal(t, "shared", r.Str("mode"))
	}
	// A replica may answer one more 503 while its other connections find the restarted Redis.
	harness.Eventually(t, 5*time.Second, "both readers listed as holders", func() bool {
		return slices.Equal(w.sharedOwners("rs"), []string{"a", "b"})
	})
}
