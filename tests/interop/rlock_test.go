package interop

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
	"github.com/leasegate/leasegate/internal/redisson"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestRedissonHolderKeepsTheGatewayOut: while a Redisson client holds rs.orders, the gateway
// answers 409 with the time the hold has left, GET shows the Redisson holder as such, and a
// gateway long-poll gets the lock within milliseconds of Redisson's unlock (woken by its message,
// not by the hold's 30 s expiry).
func TestRedissonHolderKeepsTheGatewayOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	a := w.jvm(t, redisson.Options{})
	l := a.Lock("rs.orders", 1)
	ok, err := l.TryLock(ctx, 0, -1) // the watchdog's 30 s lease
	require.NoError(t, err)
	require.True(t, ok)

	r := w.acquire("rs.orders", testkit.AcquireBody("web", 5000))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	assert.Greater(t, r.Int("retry_after_ms"), int64(20_000), "the Redisson hold's time left")

	st := w.state(t, "rs.orders")
	assert.Equal(t, true, st["held"])
	assert.Equal(t, "exclusive", st["mode"])
	holders, _ := st["redisson_holders"].([]any)
	require.Len(t, holders, 1, "%v", st)
	h := holders[0].(map[string]any)
	assert.Equal(t, l.Field(), h["field"])
	assert.Equal(t, "1", fmt.Sprint(h["holds"]))

	// A waiter, woken by the unlock's message.
	waited := testkit.StartWaiter(w.Client, ctx, "rs.orders", "web", 5000, 15_000)
	testkit.EventuallyPaced(t, 10*time.Second, "the waiter in line", func() bool { return w.Waiters(t, "rs.orders") == 1 })
	unlocked := time.Now()
	require.NoError(t, l.Unlock(ctx))
	got := testkit.Receive(t, waited, 10*time.Second, "the waiter's answer")
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	within(t, time.Since(unlocked), time.Second, "the gateway waiter's grant after Redisson's unlock")

	// Now the gateway holds: Redisson's tryLock fails, and its unlock of a lock it does not hold
	// fails as Java's IllegalMonitorStateException does.
	ok, err = l.TryLock(ctx, 0, 10*time.Second)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.ErrorIs(t, l.Unlock(ctx), redisson.ErrIllegalMonitorState)
	w.release(t, "rs.orders", got)
}

// TestGatewayHolderKeepsRedissonOut: while the gateway holds rs.jobs (with a long TTL), Redisson's
// tryLock fails, and a waiting tryLock gets it within milliseconds of the gateway's release.
func TestGatewayHolderKeepsRedissonOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	g := w.acquire("rs.jobs", testkit.AcquireBody("web", 60_000))
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))

	l := w.jvm(t, redisson.Options{}).Lock("rs.jobs", 1)
	ok, err := l.TryLock(ctx, 0, -1)
	require.NoError(t, err)
	assert.False(t, ok, "Redisson's tryLock while the gateway holds")
	locked, err := l.IsLocked(ctx)
	require.NoError(t, err)
	assert.True(t, locked)

	type result struct {
		ok  bool
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		ok, err := l.TryLock(ctx, 20*time.Second, 10*time.Second)
		done <- result{ok, err, time.Now()}
	}()
	// Redisson subscribes before it retries: give it the time to (its channel has a subscriber).
	testkit.EventuallyPaced(t, 10*time.Second, "Redisson's subscription", func() bool {
		n, err := w.Redis.DoList("PUBSUB", "NUMSUB", "redisson_lock__channel:{rs.jobs}")
		return err == nil && len(n) == 2 && n[1] != "0" || w.sharded
	})
	released := time.Now()
	w.release(t, "rs.jobs", g)
	var res result
	select {
	case res = <-done:
	case <-time.After(15 * time.Second):
		h, _ := w.Redis.DoList("HGETALL", "rs.jobs")
		n, _ := w.Redis.DoList("PUBSUB", "NUMSUB", "redisson_lock__channel:{rs.jobs}")
		t.Fatalf("Redisson's tryLock did not return within 15 s of the release; rs.jobs: %q, subscribers: %q", h, n)
	}
	require.NoError(t, res.err)
	require.True(t, res.ok)
	within(t, res.at.Sub(released), time.Second, "Redisson's grant after the gateway's release (TTL 60 s)")

	r := w.acquire("rs.jobs", testkit.AcquireBody("web", 5000))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.NoError(t, l.Unlock(ctx))
}

// TestReentryOnEitherSide: a Redisson holder's re-entries and a gateway lease's re-entries each
// count on their own side; neither side's release frees the other's hold, and the watchdogs each
// renew their own holder only.
func TestReentryOnEitherSide(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	l := w.jvm(t, redisson.Options{WatchdogTimeout: 3 * time.Second}).Lock("rs.reentry", 1)
	for range 2 {
		ok, err := l.TryLock(ctx, 0, -1)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.NoError(t, l.Unlock(ctx))
	// Still held (count 1), and renewed by Redisson's watchdog past its 3 s lease.
	deadline := time.Now().Add(4 * time.Second)
	testkit.EventuallyPaced(t, 6*time.Second, "Redisson's watchdog lease to outlive its 3 s", func() bool { return time.Now().After(deadline) })
	r := w.acquire("rs.reentry", testkit.AcquireBody("web", 5000))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.NoError(t, l.Unlock(ctx))

	// The gateway's lease, with a watchdog, re-entered twice.
	g := w.acquire("rs.reentry", testkit.WatchdogBody("web", 1500, ""))
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	re := w.Client.Do(http.MethodPost, "/locks/rs.reentry", testkit.TokenHeader(g.Str("token")), testkit.WatchdogBody("web", 1500, ""))
	require.Equal(t, http.StatusOK, re.Status, string(re.Body))
	deadline = time.Now().Add(3 * time.Second)
	testkit.EventuallyPaced(t, 5*time.Second, "the gateway's watchdog lease to outlive its 1.5 s", func() bool { return time.Now().After(deadline) })
	ok, err := l.TryLock(ctx, 0, -1)
	require.NoError(t, err)
	assert.False(t, ok, "the gateway's watchdog keeps the hold")
	w.release(t, "rs.reentry", g) // one re-entry back: still held
	ok, err = l.TryLock(ctx, 0, -1)
	require.NoError(t, err)
	assert.False(t, ok, "one gateway re-entry is left")
	w.release(t, "rs.reentry", g)
	ok, err = l.TryLock(ctx, 0, -1)
	require.NoError(t, err)
	assert.True(t, ok, "free once the gateway's last re-entry is given back")
	require.NoError(t, l.Unlock(ctx))
}

// TestForceReleaseOfARedissonHolder: an admin force release takes a Redisson client's hold as
// Redisson's own forceUnlock does: the lock is free at once, Redisson's unlock then fails and its
// watchdog stops renewing.
func TestForceReleaseOfARedissonHolder(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	l := w.jvm(t, redisson.Options{WatchdogTimeout: 3 * time.Second}).Lock("rs.forced", 1)
	ok, err := l.TryLock(ctx, 0, -1)
	require.NoError(t, err)
	require.True(t, ok)

	r := w.Client.Do(http.MethodDelete, "/locks/rs.forced?force=true", nil, "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	g := w.acquire("rs.forced", testkit.AcquireBody("web", 10_000))
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	assert.ErrorIs(t, l.Unlock(ctx), redisson.ErrIllegalMonitorState)
	// Redisson's watchdog renews only its own field: the gateway's hold keeps its own TTL.
	ttl := w.Client.Do(http.MethodGet, "/locks/rs.forced", nil, "").Int("ttl_ms")
	assert.LessOrEqual(t, ttl, int64(10_000))
	w.release(t, "rs.forced", g)
}

// TestFencesRiseAcrossRedissonHolds: every grant the gateway answers carries a fence above the one
// before, whatever Redisson clients held in between.
func TestFencesRiseAcrossRedissonHolds(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	l := w.jvm(t, redisson.Options{}).Lock("rs.fenced", 1)
	var last int64
	for range 5 {
		g := w.acquire("rs.fenced", testkit.AcquireBody("web", 10_000))
		require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
		require.Greater(t, g.Int("fence"), last)
		last = g.Int("fence")
		w.release(t, "rs.fenced", g)
		ok, err := l.TryLock(ctx, 0, 10*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestMixedClientsNeverHoldAtOnce: gateway clients and Redisson clients (two instances, two
// threads each) contend for one name; each holder marks a shared critical section, which must
// never have two holders.
func TestMixedClientsNeverHoldAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const rounds = 15
	var inside, overlaps atomic.Int32
	var mu sync.Mutex
	var order []string
	enter := func(who string) {
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
		<-time.After(2 * time.Millisecond) // the work under the lock
		inside.Add(-1)
	}
	var wg sync.WaitGroup
	for i := range 2 {
		c := w.jvm(t, redisson.Options{})
		for thread := range 2 {
			l := c.Lock("rs.contended", int64(thread+1))
			who := fmt.Sprintf("redisson-%d.%d", i, thread)
			wg.Go(func() {
				for range rounds {
					ok, err := l.TryLock(ctx, 10*time.Second, 5*time.Second)
					if err != nil || !ok {
						t.Errorf("%s: tryLock %v %v", who, ok, err)
						return
					}
					enter(who)
					if err := l.Unlock(ctx); err != nil {
						t.Errorf("%s: unlock: %v", who, err)
						return
					}
				}
			})
		}
	}
	for i := range 4 {
		who := fmt.Sprintf("gateway-%d", i)
		wg.Go(func() {
			for range rounds {
				r := w.Client.DoContext(ctx, http.MethodPost, "/locks/rs.contended", nil, testkit.WaitBody(who, 5000, 10_000))
				if r.Status != http.StatusCreated {
					t.Errorf("%s: %d %s", who, r.Status, r.Body)
					return
				}
				enter(who)
				if rel := w.Client.DoContext(ctx, http.MethodDelete, "/locks/rs.contended", testkit.TokenHeader(r.Str("token")), ""); rel.Status != http.StatusOK {
					t.Errorf("%s: release %d %s", who, rel.Status, rel.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two holders at once")
	assert.Len(t, order, 8*rounds)
	gateway := slices.IndexFunc(order, func(s string) bool { return s[0] == 'g' })
	redissonAt := slices.IndexFunc(order, func(s string) bool { return s[0] == 'r' })
	assert.True(t, gateway >= 0 && redissonAt >= 0, "both kinds of client held the lock")
	// How the two sides shared it: the longest run of grants to one side.
	longest, run := 0, 0
	for i := range order {
		if i > 0 && order[i][0] == order[i-1][0] {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
	}
	t.Logf("%d grants, %d to each side; longest run of grants to one side: %d", len(order), 4*rounds, longest)
}

// TestRedissonNameValidation: prefixes are checked at start, and names shared with Redisson keep
// the gateway's name rules.
func TestRedissonNameValidation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := w.acquire("rs.a{b}", testkit.AcquireBody("web", 5000))
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	// A TTL Redisson's readers' watchdog could cut short is refused on read-write names.
	r = w.acquire("rw.long", testkit.AcquireBody("web", 60_000))
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	assert.Contains(t, string(r.Body), "RReadWriteLock")
}

// TestMultiLockTakesRedissonMembersAsRLocks: a multi-lock whose members include names shared with
// Redisson is refused while a Redisson client holds one of them, waits for it and is woken by its
// unlock, and, once granted, keeps Redisson's clients out of every shared member.
func TestMultiLockTakesRedissonMembersAsRLocks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	c := w.jvm(t, redisson.Options{})
	a, b := c.Lock("rs.m.a", 1), c.Lock("rs.m.b", 1)
	members := []string{"plain.m", "rs.m.a", "rs.m.b"}
	require.True(t, tryOnce(t, a, -1))

	r := testkit.LockAll(w.Client, "web", members, 10_000, 0, "")
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	assert.False(t, w.Held("plain.m"), "all or nothing")
	waiting := make(chan time.Time, 1)
	var g *harness.Response
	go func() {
		g = testkit.LockAll(w.Client, "web", members, 10_000, 15_000, "")
		waiting <- time.Now()
	}()
	testkit.EventuallyPaced(t, 10*time.Second, "the multi-lock in line", func() bool { return w.Waiters(t, "rs.m.a") == 1 })
	unlocked := time.Now()
	require.NoError(t, a.Unlock(ctx))
	at := testkit.Receive(t, waiting, 15*time.Second, "the multi-lock")
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	within(t, at.Sub(unlocked), time.Second, "the multi-lock's grant after Redisson's unlock")

	assert.False(t, tryOnce(t, a, -1))
	assert.False(t, tryOnce(t, b, -1))
	rel := w.Client.Do(http.MethodDelete, "/multilocks/"+g.Str("id"), testkit.TokenHeader(g.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
	assert.True(t, tryOnce(t, b, -1))
	require.NoError(t, b.Unlock(ctx))
}

// TestListingShowsRedissonHolders: GET /locks (the dashboard's listing) shows a lock held by
// a Redisson client alone, its holder marked as Redisson's, and a lock the gateway holds once.
func TestListingShowsRedissonHolders(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	l := w.jvm(t, redisson.Options{}).Lock("rs.listed.theirs", 1)
	require.True(t, tryOnce(t, l, -1))
	g := w.acquire("rs.listed.ours", testkit.AcquireBody("web", 20_000))
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))

	r := w.Client.Do(http.MethodGet, "/locks?prefix=rs.listed.&limit=2", nil, "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	byName := map[string]map[string]any{}
	cursor := r.Str("next_cursor")
	collect := func(r *harness.Response) {
		for _, e := range r.JSON()["locks"].([]any) {
			m := e.(map[string]any)
			require.NotContains(t, byName, m["lock"], "listed twice")
			byName[m["lock"].(string)] = m
		}
	}
	collect(r)
	for cursor != "" {
		r = w.Client.Do(http.MethodGet, "/locks?prefix=rs.listed.&limit=2&cursor="+cursor, nil, "")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		collect(r)
		cursor = r.Str("next_cursor")
	}
	require.Len(t, byName, 2, "%v", byName)
	theirs := byName["rs.listed.theirs"]
	assert.Equal(t, l.Field(), theirs["owner"])
	holders := theirs["held_by"].([]any)
	require.Len(t, holders, 1)
	assert.Equal(t, true, holders[0].(map[string]any)["redisson"])
	assert.Equal(t, "web", byName["rs.listed.ours"]["owner"])
	require.NoError(t, l.Unlock(ctx))
	w.release(t, "rs.listed.ours", g)
}
