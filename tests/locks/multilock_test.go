package locks

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// Multi-locks: POST /multilocks takes several locks all or nothing, across two gateway replicas.

// multiWorld is one redis-server and two gateway replicas on it, with a client each.
type multiWorld struct {
	redis   *harness.Redis
	gws     [2]*harness.Gateway
	clients [2]*harness.Client
}

func newMultiWorld(t *testing.T) *multiWorld {
	t.Helper()
	r, opts := testkit.Redis(t)
	gw1 := harness.NewGateway(t, opts)
	opts.KeyPrefix = gw1.KeyPrefix
	gw2 := harness.NewGateway(t, opts)
	t.Cleanup(func() { // stopped together: see newRedissonWorld (tests/sharedlocks)
		var wg sync.WaitGroup
		for _, g := range []*harness.Gateway{gw1, gw2} {
			wg.Go(func() { _ = g.Stop() })
		}
		wg.Wait()
	})
	return &multiWorld{redis: r, gws: [2]*harness.Gateway{gw1, gw2},
		clients: [2]*harness.Client{harness.NewClient(t, gw1.URL), harness.NewClient(t, gw2.URL)}}
}

func (w *multiWorld) replica(i int) *harness.Client { return w.clients[i%2] }

// mustLockAll is a multi-lock acquire that must succeed.
func mustLockAll(t *testing.T, c *harness.Client, owner string, locks []string, ttlMs, waitMs int64, extra string) *harness.Response {
	t.Helper()
	r := testkit.LockAll(c, owner, locks, ttlMs, waitMs, extra)
	require.Equal(t, http.StatusCreated, r.Status, "%s takes %q: %s", owner, locks, r.Body)
	return r
}

// fences returns a multi-lock grant's fence per member.
func fences(r *harness.Response) map[string]int64 {
	out := map[string]int64{}
	members, _ := r.JSON()["locks"].([]any)
	for _, m := range members {
		m := m.(map[string]any)
		f, _ := m["fence"].(json.Number).Int64()
		out[m["lock"].(string)] = f
	}
	return out
}

// state is GET /locks/{lock} through replica i.
func (w *multiWorld) state(i int, lock string) *harness.Response {
	return w.replica(i).Do(http.MethodGet, "/locks/"+lock, nil, "")
}

// awaitFree polls until lock is held by nobody and nobody waits for it (through replica i).
func (w *multiWorld) awaitFree(t *testing.T, i int, lock string, within time.Duration) {
	t.Helper()
	harness.Eventually(t, within, fmt.Sprintf("%q free, nobody waiting", lock), func() bool {
		st := w.state(i, lock)
		return st.Status == http.StatusOK && st.JSON()["held"] == false && st.Int("waiters") == 0
	})
}

func releaseGroup(c *harness.Client, path, token string) *harness.Response {
	return c.Do(http.MethodDelete, path, testkit.TokenHeader(token), "")
}

func TestMultiLockGrantsEveryMemberUnderOneToken(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	g := mustLockAll(t, w.replica(0), "mover", []string{"acct.b", "acct.a"}, 60000, 0, "")
	id := g.Str("id")
	assert.Equal(t, "/multilocks/"+id, g.Header.Get("Location"))
	assert.Equal(t, "exclusive", g.Str("mode"))
	f := fences(g)
	require.Len(t, f, 2)
	assert.Equal(t, []string{"acct.a", "acct.b"}, slices.Sorted(func(yield func(string) bool) {
		for k := range f {
			if !yield(k) {
				return
			}
		}
	}))
	for _, name := range []string{"acct.a", "acct.b"} {
		st := w.state(1, name)
		assert.Equal(t, true, st.JSON()["held"])
		assert.Equal(t, "mover", st.Str("owner"))
		assert.Equal(t, id, st.Str("multilock"), "GET /locks/%s shows the group's holder", name)
		assert.Equal(t, f[name], st.Int("fence"))
	}

	// Members are ordinary locks: a plain try gets 409, and the tokens do not mix.
	r := w.replica(1).Do(http.MethodPost, "/locks/acct.a", nil, testkit.AcquireBody("other", 60000))
	assert.Equal(t, http.StatusConflict, r.Status)
	r = w.replica(1).Do(http.MethodDelete, "/locks/acct.a", testkit.TokenHeader(g.Str("token")), "")
	assert.Equal(t, http.StatusBadRequest, r.Status, "a group token on /locks: %s", r.Body)
	assert.Equal(t, "urn:leasegate:problem:invalid-lease-token", r.Str("type"))
	single := w.replica(0).Do(http.MethodPost, "/locks/acct.c", nil, testkit.AcquireBody("other", 60000))
	require.Equal(t, http.StatusCreated, single.Status)
	r = releaseGroup(w.replica(0), "/multilocks", single.Str("token"))
	assert.Equal(t, http.StatusBadRequest, r.Status, "a lock token on /multilocks: %s", r.Body)
	other := mustLockAll(t, w.replica(0), "x", []string{"p", "q"}, 60000, 0, "")
	r = releaseGroup(w.replica(0), "/multilocks/"+other.Str("id"), g.Str("token"))
	assert.Equal(t, http.StatusBadRequest, r.Status, "a group token under another group's id: %s", r.Body)

	// Renew through either path, then release through the Location.
	r = w.replica(1).Do(http.MethodPost, "/multilocks/renew", testkit.TokenHeader(g.Str("token")), `{"ttl_ms":90000}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, int64(90000), r.Int("ttl_ms"))
	assert.Equal(t, f, fences(r), "renewal keeps the fences")
	assert.Greater(t, w.state(0, "acct.b").Int("ttl_ms"), int64(60000))
	r = releaseGroup(w.replica(1), g.Header.Get("Location"), g.Str("token"))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, []string{"acct.a", "acct.b"}, testkit.Strings(r, "locks"))
	for _, name := range []string{"acct.a", "acct.b"} {
		assert.Equal(t, false, w.state(0, name).JSON()["held"])
	}
	r = releaseGroup(w.replica(0), "/multilocks", g.Str("token"))
	assert.Equal(t, http.StatusGone, r.Status)
	assert.Equal(t, []string{"acct.a", "acct.b"}, testkit.Strings(r, "locks"))

	// The next grant of a member has a greater fence.
	again := mustLockAll(t, w.replica(1), "mover", []string{"acct.a", "acct.z"}, 60000, 0, "")
	assert.Greater(t, fences(again)["acct.a"], f["acct.a"])
}

func TestMultiLockRejectsBadRequestsBeforeRedis(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	calls, err := w.redis.ScriptCalls()
	require.NoError(t, err)
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("l%d", i)
	}
	for _, tc := range []struct{ name, body, param string }{
		{"one lock", testkit.MultiBody("o", []string{"a"}, 1000, 0, ""), "locks"},
		{"65 locks", testkit.MultiBody("o", many, 1000, 0, ""), "locks"},
		{"duplicate", testkit.MultiBody("o", []string{"a", "b", "a"}, 1000, 0, ""), "locks[2]"},
		{"bad name", testkit.MultiBody("o", []string{"a", "b c"}, 1000, 0, ""), "locks[1]"},
		{"bad mode", testkit.MultiBody("o", []string{"a", "b"}, 1000, 0, `,"mode":"both"`), "mode"},
		{"no owner", `{"locks":["a","b"]}`, "owner"},
		{"max_hold without watchdog", testkit.MultiBody("o", []string{"a", "b"}, 1000, 0, `,"max_hold_ms":5000`), "max_hold_ms"},
	} {
		r := w.replica(0).Do(http.MethodPost, "/multilocks", nil, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.name, r.Body)
		assert.Equal(t, "urn:leasegate:problem:invalid-request", r.Str("type"), tc.name)
		assert.Contains(t, string(r.Body), `"name":"`+tc.param+`"`, tc.name)
	}
	r := w.replica(0).Do(http.MethodPost, "/multilocks", harness.Headers{"Idempotency-Key": "k1"}, testkit.MultiBody("o", []string{"a", "b"}, 1000, 0, ""))
	assert.Equal(t, http.StatusBadRequest, r.Status, "Idempotency-Key is refused, not ignored: %s", r.Body)
	r = w.replica(0).Do(http.MethodDelete, "/multilocks/not-an-id", testkit.TokenHeader("x.y"), "")
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	r = w.replica(0).Do(http.MethodDelete, "/multilocks", testkit.TokenHeader(harness.AlterSignature("eyJ2IjoxfQ.c2ln")), "")
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	after, err := w.redis.ScriptCalls()
	require.NoError(t, err)
	assert.Equal(t, calls, after, "no bad request reached Redis")
}

// TestMultiLockTryOnceIsAllOrNothingUnderRacers: 100 racers on two replicas take overlapping sets
// ({a,b}, {b,c}, {c,a} and b alone) with try-once calls. For each member, the intervals in which a
// holder certainly held it (from its grant's answer to its release's sending) never overlap, and
// fences grow in grant order; a racer that got 409 never shows up as a holder of any member (no
// partial hold), and every 409 lists held members it asked for.
func TestMultiLockTryOnceIsAllOrNothingUnderRacers(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	sets := [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"b"}}
	type hold struct {
		owner    string
		fence    int64
		from, to time.Time
	}
	var (
		mu       sync.Mutex
		holds    = map[string][]hold{}
		problems []string
		grants   int
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	const racers, rounds = 100, 5
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			c := w.replica(i)
			set := sets[i%len(sets)]
			for round := range rounds {
				owner := fmt.Sprintf("racer-%03d-%d", i, round)
				var r *harness.Response
				if len(set) == 1 {
					r = c.Do(http.MethodPost, "/locks/"+set[0], nil, testkit.AcquireBody(owner, 10000))
				} else {
					r = testkit.LockAll(c, owner, set, 10000, 0, "")
				}
				switch r.Status {
				case http.StatusCreated:
				case http.StatusConflict:
					held := testkit.Strings(r, "locks")
					if len(set) > 1 && (len(held) == 0 || len(slices.DeleteFunc(slices.Clone(held), func(s string) bool { return slices.Contains(set, s) })) > 0) {
						fail("409 for %v lists %v", set, held)
					}
					for _, name := range set { // a refused racer holds nothing
						if st := w.state(i+1, name); st.Str("owner") == owner {
							fail("%s got 409 but holds %q: %s", owner, name, st.Body)
						}
					}
					continue
				default:
					fail("%s: unexpected %d %s", owner, r.Status, r.Body)
					continue
				}
				from := time.Now()
				f := map[string]int64{set[0]: r.Int("fence")}
				if len(set) > 1 {
					f = fences(r)
				}
				for _, name := range set { // every member is held, by this racer
					if st := w.state(i+1, name); st.Str("owner") != owner || st.Int("fence") != f[name] {
						fail("%s was granted %v but GET %q shows %s", owner, set, name, st.Body)
					}
				}
				to := time.Now()
				var rel *harness.Response
				if len(set) == 1 {
					rel = c.Do(http.MethodDelete, "/locks/"+set[0], testkit.TokenHeader(r.Str("token")), "")
				} else {
					rel = releaseGroup(c, "/multilocks/"+r.Str("id"), r.Str("token"))
				}
				if rel.Status != http.StatusOK {
					fail("%s release: %d %s", owner, rel.Status, rel.Body)
				}
				mu.Lock()
				grants++
				for _, name := range set {
					holds[name] = append(holds[name], hold{owner, f[name], from, to})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, problems)
	require.Positive(t, grants)
	for name, hs := range holds {
		slices.SortFunc(hs, func(a, b hold) int { return a.from.Compare(b.from) })
		for k := 1; k < len(hs); k++ {
			prev, cur := hs[k-1], hs[k]
			assert.False(t, cur.from.Before(prev.to), "%q: %s held it from %v while %s held it until %v", name, cur.owner, cur.from, prev.owner, prev.to)
			assert.Greater(t, cur.fence, prev.fence, "%q: fences grow in grant order", name)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		w.awaitFree(t, 0, name, 5*time.Second)
	}
	t.Logf("%d grants among %d calls", grants, racers*rounds)
}

// TestMultiLockOppositeOrdersBothProgress: two clients take {a,b} and {b,a} over and over, with
// waits, while single-lock waiters come and go on both: nobody deadlocks, every call is granted.
func TestMultiLockOppositeOrdersBothProgress(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	const iterations = 30
	var wg sync.WaitGroup
	errs := make(chan string, 4*iterations)
	for i, set := range [][]string{{"a", "b"}, {"b", "a"}} {
		wg.Go(func() {
			for k := range iterations {
				r := testkit.LockAll(w.replica(i), fmt.Sprintf("group-%d", i), set, 10000, 15000, "")
				if r.Status != http.StatusCreated {
					errs <- fmt.Sprintf("group %v, iteration %d: %d %s", set, k, r.Status, r.Body)
					return
				}
				if rel := releaseGroup(w.replica(i+1), "/multilocks", r.Str("token")); rel.Status != http.StatusOK {
					errs <- fmt.Sprintf("group %v release: %d %s", set, rel.Status, rel.Body)
				}
			}
		})
	}
	for i, name := range []string{"b", "a"} { // single waiters on each member, in between
		wg.Go(func() {
			for k := range iterations {
				r := w.replica(i).Do(http.MethodPost, "/locks/"+name, nil, fmt.Sprintf(`{"owner":"single-%d","ttl_ms":10000,"wait_ms":15000}`, i))
				if r.Status != http.StatusCreated {
					errs <- fmt.Sprintf("single %q, iteration %d: %d %s", name, k, r.Status, r.Body)
					return
				}
				if rel := w.replica(i).Do(http.MethodDelete, "/locks/"+name, testkit.TokenHeader(r.Str("token")), ""); rel.Status != http.StatusOK {
					errs <- fmt.Sprintf("single %q release: %d %s", name, rel.Status, rel.Body)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestMultiLockWaiterThatGivesUpHoldsNothing: a group waiting for a member held by someone else
// takes the free members before it (name order) and, when its wait runs out or its client leaves,
// gives them back and leaves every line.
func TestMultiLockWaiterThatGivesUpHoldsNothing(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	blocker := w.replica(0).Do(http.MethodPost, "/locks/m2", nil, testkit.AcquireBody("blocker", 60000))
	require.Equal(t, http.StatusCreated, blocker.Status)

	// The wait runs out.
	start := time.Now()
	r := testkit.LockAll(w.replica(1), "patient", []string{"m3", "m2", "m1"}, 60000, 800, "")
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.GreaterOrEqual(t, time.Since(start), 800*time.Millisecond)
	assert.Equal(t, []string{"m2"}, testkit.Strings(r, "locks"))
	assert.GreaterOrEqual(t, r.Int("waited_ms"), int64(800))
	assert.NotEmpty(t, r.Str("queue_ticket"), "a group that waited in a member's line gets a group ticket")
	for _, name := range []string{"m1", "m3"} {
		w.awaitFree(t, 1, name, time.Second) // given back at once (its TTL is a minute)
	}
	assert.Equal(t, int64(0), w.state(0, "m2").Int("waiters"))

	// The client leaves mid-wait: once m1 is visibly the group's, cancel.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.replica(1).Send(ctx, http.MethodPost, "/multilocks", nil, testkit.MultiBody("leaver", []string{"m1", "m2", "m3"}, 60000, 30000, ""))
	}()
	harness.Eventually(t, 5*time.Second, "m1 held by the waiting group, m2 waited for", func() bool {
		return w.state(0, "m1").Str("owner") == "leaver" && w.state(0, "m2").Int("waiters") == 1
	})
	cancel()
	<-done
	w.awaitFree(t, 0, "m1", 2*time.Second)
	harness.Eventually(t, 2*time.Second, "m2 has no waiter", func() bool { return w.state(0, "m2").Int("waiters") == 0 })
	assert.Equal(t, "blocker", w.state(0, "m2").Str("owner"))
	assert.Equal(t, false, w.state(0, "m3").JSON()["held"])
}

// TestMultiLockKeepsItsPlaceAcrossLongPolls: a waiting group whose long-poll runs out in a
// member's line answers 409 with a queue ticket; each next long-poll that presents it (through
// either replica) resumes the same group: the same id and arrival in that line, ahead of a single
// waiter that came between two of its long-polls, and waited_ms counted from the first. Released,
// the member goes to the group first. Nothing is held between long-polls. The ticket is refused
// (400) for another set of locks or owner; a lock's ticket by /multilocks, and the group's by a
// lock.
func TestMultiLockKeepsItsPlaceAcrossLongPolls(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	a, b := "resume.a", "resume.b"
	locks := []string{b, a}
	holder := w.replica(0).Do(http.MethodPost, "/locks/"+b, nil, testkit.AcquireBody("holder", 60000))
	require.Equal(t, http.StatusCreated, holder.Status, "%s", holder.Body)
	withTicket := func(ticket string) string { return fmt.Sprintf(`,"queue_ticket":%q`, ticket) }

	// The first long-poll takes a and waits in b's line, where it shows under its id.
	first := make(chan *harness.Response, 1)
	go func() { first <- testkit.LockAll(w.replica(1), "group", locks, 60000, 1000, "") }()
	var in testkit.ListedWaiter
	harness.Eventually(t, 5*time.Second, "the group in b's line", func() bool {
		ws := testkit.Waiting(w.replica(0), b)
		if len(ws) == 1 && ws[0].Multilock != "" {
			in = ws[0]
			return true
		}
		return false
	})
	r := testkit.Receive(t, first, 5*time.Second, "the first long-poll's answer")
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Equal(t, []string{b}, testkit.Strings(r, "locks"))
	ticket := r.Str("queue_ticket")
	require.NotEmpty(t, ticket)
	w.awaitFree(t, 0, a, time.Second) // nothing is held between long-polls

	// A single waiter queues while the group is between long-polls.
	later := make(chan *harness.Response, 1)
	go func() {
		later <- w.replica(0).Do(http.MethodPost, "/locks/"+b, nil, testkit.WaitBody("later", 60000, 15000))
	}()
	harness.Eventually(t, 5*time.Second, "the later waiter in b's line", func() bool { return w.state(0, b).Int("waiters") == 1 })

	// The second long-poll, through the other replica, with the ticket.
	r = testkit.LockAll(w.replica(0), "group", locks, 60000, 300, withTicket(ticket))
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.GreaterOrEqual(t, r.Int("waited_ms"), int64(1300), "counted from the first long-poll")
	next := r.Str("queue_ticket")
	require.NotEmpty(t, next)
	assert.NotEqual(t, ticket, next)

	// The third waits on, back ahead of the later waiter under the same id and arrival.
	third := make(chan *harness.Response, 1)
	go func() { third <- testkit.LockAll(w.replica(1), "group", locks, 60000, 15000, withTicket(next)) }()
	harness.Eventually(t, 5*time.Second, "the group back first in b's line", func() bool {
		ws := testkit.Waiting(w.replica(0), b)
		return len(ws) == 2 && ws[0] == in && ws[1].Owner == "later"
	})
	assert.Equal(t, in.Multilock, w.state(0, a).Str("multilock"), "a taken again by the same group")
	require.Equal(t, http.StatusOK, w.replica(0).Do(http.MethodDelete, "/locks/"+b, testkit.TokenHeader(holder.Str("token")), "").Status)
	g := testkit.Receive(t, third, 5*time.Second, "the group's grant")
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	assert.Equal(t, in.Multilock, g.Str("id"), "the same group from the first long-poll to the grant")
	assert.Equal(t, g.Str("id"), w.state(0, b).Str("multilock"))
	assert.Equal(t, int64(1), w.state(0, b).Int("waiters"), "the later waiter still waits")
	select {
	case got := <-later:
		t.Fatalf("the later waiter was answered before the group: %s", got.Body)
	default:
	}

	// Bound to its set of locks and its owner; tickets of locks and groups are not interchangeable.
	lockTicket := w.replica(0).Do(http.MethodPost, "/locks/"+a, nil, testkit.WaitBody("group", 60000, 50))
	require.Equal(t, http.StatusConflict, lockTicket.Status, "%s", lockTicket.Body)
	require.NotEmpty(t, lockTicket.Str("queue_ticket"))
	for what, req := range map[string]string{
		"another set of locks": testkit.MultiBody("group", []string{a, b, "resume.c"}, 60000, 100, withTicket(ticket)),
		"another owner":        testkit.MultiBody("thief", locks, 60000, 100, withTicket(ticket)),
		"a lock's ticket":      testkit.MultiBody("group", locks, 60000, 100, withTicket(lockTicket.Str("queue_ticket"))),
	} {
		r := w.replica(1).Do(http.MethodPost, "/multilocks", nil, req)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", what, r.Body)
		assert.Contains(t, string(r.Body), "queue_ticket", what)
	}
	r = w.replica(1).Do(http.MethodPost, "/locks/"+b, nil, fmt.Sprintf(`{"owner":"group","ttl_ms":60000,"wait_ms":100,"queue_ticket":%q}`, next))
	require.Equal(t, http.StatusBadRequest, r.Status, "a group's ticket at a lock: %s", r.Body)

	require.Equal(t, http.StatusOK, releaseGroup(w.replica(0), "/multilocks", g.Str("token")).Status)
	l := testkit.Receive(t, later, 5*time.Second, "b for the later waiter")
	require.Equal(t, http.StatusCreated, l.Status, "%s", l.Body)
}

// TestMultiLockWaiterHoldsEarlierMembersAliveWhileItWaits: the members a waiting group holds are
// renewed by its replica, so a wait longer than the TTL still ends with every member.
//
// The TTL is 2 s: the replica renews what the group holds every third of it, between two slices of
// its wait. A 600 ms TTL (held as 1 s while waiting) left about 600 ms for that on a loaded machine,
// and k1 was lost there once.
func TestMultiLockWaiterHoldsEarlierMembersAliveWhileItWaits(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	blocker := w.replica(0).Do(http.MethodPost, "/locks/k2", nil, testkit.AcquireBody("blocker", 60000))
	require.Equal(t, http.StatusCreated, blocker.Status)
	ch := make(chan *harness.Response, 1)
	go func() { ch <- testkit.LockAll(w.replica(1), "slow", []string{"k1", "k2"}, 2000, 30000, "") }()
	harness.Eventually(t, 5*time.Second, "k1 held by the group", func() bool { return w.state(0, "k1").Str("owner") == "slow" })
	// Three TTLs pass on the Redis clock while the group waits for k2; k1 stays the group's.
	testkit.Throughout(t, 6*time.Second, "k1 stays held by the waiting group", func() bool { return w.state(0, "k1").Str("owner") == "slow" })
	require.Equal(t, http.StatusOK, w.replica(0).Do(http.MethodDelete, "/locks/k2", testkit.TokenHeader(blocker.Str("token")), "").Status)
	r := testkit.Receive(t, ch, 10*time.Second, "the group's grant")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	assert.Equal(t, r.Str("id"), w.state(1, "k2").Str("multilock"))
	assert.Equal(t, r.Str("id"), w.state(1, "k1").Str("multilock"))
}

// TestMultiLockWaiterOfAKilledReplicaFreesWhatItTook: kill -9 of the replica serving a waiting
// group: the member it took runs out within its TTL and its place in the other member's line
// lapses, so single waiters get both.
func TestMultiLockWaiterOfAKilledReplicaFreesWhatItTook(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	blocker := w.replica(0).Do(http.MethodPost, "/locks/n2", nil, testkit.AcquireBody("blocker", 60000))
	require.Equal(t, http.StatusCreated, blocker.Status)
	go func() { // its replica dies under it: a transport error
		_, _ = w.replica(1).Send(context.Background(), http.MethodPost, "/multilocks", nil, testkit.MultiBody("doomed", []string{"n1", "n2"}, 1500, 30000, ""))
	}()
	harness.Eventually(t, 5*time.Second, "n1 held by the group, n2 waited for", func() bool {
		return w.state(0, "n1").Str("owner") == "doomed" && w.state(0, "n2").Int("waiters") == 1
	})
	require.NoError(t, w.gws[1].Kill())
	next := make(chan *harness.Response, 1)
	go func() {
		next <- w.replica(0).Do(http.MethodPost, "/locks/n1", nil, `{"owner":"next","ttl_ms":60000,"wait_ms":10000}`)
	}()
	r := testkit.Receive(t, next, 15*time.Second, "n1 for the next single waiter")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	harness.Eventually(t, 5*time.Second, "the dead group's place in n2's line lapses", func() bool { return w.state(0, "n2").Int("waiters") == 0 })
	require.Equal(t, http.StatusOK, w.replica(0).Do(http.MethodDelete, "/locks/n2", testkit.TokenHeader(blocker.Str("token")), "").Status)
	assert.Equal(t, false, w.state(0, "n2").JSON()["held"], "nobody took n2 on the dead group's behalf")
}

// TestMultiLockWatchdogOutlivesItsReplica: a watchdog group granted through a replica that is then
// killed is renewed by the other one, every member together.
//
// The TTL is 3 s: a renewal falls due at a third of it, and one the killed replica had claimed is
// retried by the other only after the claim's hold (250 ms) and a sweep (100 ms). A 600 ms TTL left
// about 50 ms for a loaded machine's delays, and 2 s (about a second) still failed once while the
// whole package ran; 3 s leaves over 1.5 s.
func TestMultiLockWatchdogOutlivesItsReplica(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	g := mustLockAll(t, w.replica(1), "guarded", []string{"w1", "w2", "w3"}, 3000, 0, `,"watchdog":true`)
	assert.Equal(t, true, g.JSON()["watchdog"])
	require.NoError(t, w.gws[1].Kill())
	testkit.Throughout(t, 9*time.Second, "every member stays held past three TTLs", func() bool {
		for _, name := range []string{"w1", "w2", "w3"} {
			if st := w.state(0, name); st.Str("multilock") != g.Str("id") {
				t.Logf("%s: %d %s", name, st.Status, st.Body)
				return false
			}
		}
		return true
	})
	r := releaseGroup(w.replica(0), "/multilocks", g.Str("token"))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for _, name := range []string{"w1", "w2", "w3"} {
		assert.Equal(t, false, w.state(0, name).JSON()["held"])
	}
}

// TestMultiLockMemberThatRunsOutEndsTheGroup: one member expiring (here its key vanishing, as an
// expiry does) ends the group: renew answers 410 naming it and frees the others, and a release
// afterwards answers 410 too.
func TestMultiLockMemberThatRunsOutEndsTheGroup(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "expires a member's key on the Redis")
	w := newMultiWorld(t)
	g := mustLockAll(t, w.replica(0), "holder", []string{"e1", "e2", "e3"}, 60000, 0, "")
	waiter := make(chan *harness.Response, 1)
	go func() {
		waiter <- w.replica(1).Do(http.MethodPost, "/locks/e3", nil, `{"owner":"next","ttl_ms":60000,"wait_ms":10000}`)
	}()
	harness.Eventually(t, 5*time.Second, "a waiter on e3", func() bool { return w.state(0, "e3").Int("waiters") == 1 })
	w.redis.MustDo(t, "PEXPIRE", w.gws[0].KeyPrefix+"{e2}", "1")
	harness.Eventually(t, 5*time.Second, "e2 ran out", func() bool { return w.state(0, "e2").JSON()["held"] == false })
	assert.Equal(t, g.Str("id"), w.state(0, "e1").Str("multilock"), "the others are still held until the group is next touched")

	r := w.replica(1).Do(http.MethodPost, "/multilocks/"+g.Str("id")+"/renew", testkit.TokenHeader(g.Str("token")), "")
	require.Equal(t, http.StatusGone, r.Status, "%s", r.Body)
	assert.Equal(t, []string{"e2"}, testkit.Strings(r, "locks"))
	assert.Equal(t, false, w.state(0, "e1").JSON()["held"], "renew freed the rest")
	n := testkit.Receive(t, waiter, 10*time.Second, "e3 handed to its waiter")
	require.Equal(t, http.StatusCreated, n.Status, "%s", n.Body)
	r = releaseGroup(w.replica(0), "/multilocks", g.Str("token"))
	assert.Equal(t, http.StatusGone, r.Status)
	assert.Equal(t, []string{"e1", "e2", "e3"}, testkit.Strings(r, "locks"))
}

// TestMultiLockReleaseHandsEachMemberToItsFirstWaiter: releasing a group gives each member to the
// first waiter in that member's line, and only to it.
func TestMultiLockReleaseHandsEachMemberToItsFirstWaiter(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	g := mustLockAll(t, w.replica(0), "group", []string{"h1", "h2"}, 60000, 0, "")
	waitFor := func(i int, lock, owner string) <-chan *harness.Response {
		ch := make(chan *harness.Response, 1)
		go func() {
			ch <- w.replica(i).Do(http.MethodPost, "/locks/"+lock, nil, fmt.Sprintf(`{"owner":%q,"ttl_ms":60000,"wait_ms":15000}`, owner))
		}()
		return ch
	}
	h1first := waitFor(0, "h1", "h1-first")
	harness.Eventually(t, 5*time.Second, "h1-first queued", func() bool { return w.state(0, "h1").Int("waiters") == 1 })
	h1second := waitFor(1, "h1", "h1-second")
	h2first := waitFor(1, "h2", "h2-first")
	harness.Eventually(t, 5*time.Second, "all queued", func() bool {
		return w.state(0, "h1").Int("waiters") == 2 && w.state(0, "h2").Int("waiters") == 1
	})
	r := releaseGroup(w.replica(1), "/multilocks", g.Str("token"))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for _, ch := range []<-chan *harness.Response{h1first, h2first} {
		got := testkit.Receive(t, ch, 5*time.Second, "a first waiter's grant")
		require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
		assert.Greater(t, got.Int("fence"), fences(g)[got.Str("lock")])
	}
	assert.Equal(t, "h1-first", w.state(0, "h1").Str("owner"))
	assert.Equal(t, int64(1), w.state(0, "h1").Int("waiters"), "h1-second still waits")
	select {
	case got := <-h1second:
		t.Fatalf("the second waiter was answered: %s", got.Body)
	default:
	}
}

// TestMultiLockSharedMode: a shared group coexists with shared single holders and excludes writers;
// an exclusive group waits behind a shared holder of a member.
func TestMultiLockSharedMode(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	reader := w.replica(0).Do(http.MethodPost, "/locks/s1", nil, testkit.SharedBody("reader", 60000, 0))
	require.Equal(t, http.StatusCreated, reader.Status)
	g := mustLockAll(t, w.replica(1), "readers", []string{"s1", "s2"}, 60000, 0, `,"mode":"shared"`)
	assert.Equal(t, "shared", g.Str("mode"))
	st := w.state(0, "s1")
	assert.Equal(t, int64(2), st.Int("holder_count"))
	assert.Contains(t, string(st.Body), `"multilock":"`+g.Str("id")+`"`)
	r := testkit.LockAll(w.replica(0), "writer", []string{"s2", "s3"}, 60000, 0, "")
	require.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, []string{"s2"}, testkit.Strings(r, "locks"))
	assert.Equal(t, false, w.state(0, "s3").JSON()["held"], "no partial hold")
	require.Equal(t, http.StatusOK, releaseGroup(w.replica(0), "/multilocks", g.Str("token")).Status)
	assert.Equal(t, int64(1), w.state(0, "s1").Int("holder_count"), "the single reader keeps its hold")
}

// TestMultiLockCrowd: many groups of random members wait for each other across both replicas; all
// are granted in the end, and each member's fences grow. (A deadlock would end in 409s.)
func TestMultiLockCrowd(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	names := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	last := map[string]int64{}
	for i := range 24 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for k := range 5 {
				set := slices.Clone(names)
				rng.Shuffle(len(set), func(a, b int) { set[a], set[b] = set[b], set[a] })
				set = set[:2+rng.IntN(3)]
				r := testkit.LockAll(w.replica(i), fmt.Sprintf("crowd-%d-%d", i, k), set, 10000, 30000, "")
				mu.Lock()
				if r.Status != http.StatusCreated {
					bad = append(bad, fmt.Sprintf("%v: %d %s", set, r.Status, r.Body))
				} else {
					for name, f := range fences(r) {
						if f <= last[name] {
							bad = append(bad, fmt.Sprintf("%s: fence %d after %d", name, f, last[name]))
						}
						last[name] = f
					}
				}
				mu.Unlock()
				if r.Status == http.StatusCreated {
					if rel := releaseGroup(w.replica(i+1), "/multilocks", r.Str("token")); rel.Status != http.StatusOK {
						mu.Lock()
						bad = append(bad, "release: "+string(rel.Body))
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	assert.Empty(t, bad, strings.Join(bad, "\n"))
}

// TestMultiLockMaxHoldCountsFromTheGroupsGrant: a watchdog group that waited for a member longer
// than its max hold is still renewed from its grant on (the members it took first carry the
// group's max hold from the grant, not from when each was taken), and lets go once max_hold_ms has
// passed since the grant.
//
// The TTL is 2 s and the max hold 5 s, so that renewals due every third of the TTL have time to
// come on a loaded machine (a 600 ms TTL left about 400 ms); x1 is taken over 5 s before the grant.
func TestMultiLockMaxHoldCountsFromTheGroupsGrant(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	blocker := w.replica(0).Do(http.MethodPost, "/locks/x2", nil, testkit.AcquireBody("blocker", 60000))
	require.Equal(t, http.StatusCreated, blocker.Status)
	ch := make(chan *harness.Response, 1)
	go func() {
		ch <- testkit.LockAll(w.replica(1), "guarded", []string{"x1", "x2"}, 2000, 30000, `,"watchdog":true,"max_hold_ms":5000`)
	}()
	harness.Eventually(t, 5*time.Second, "x1 taken by the waiting group", func() bool { return w.state(0, "x1").Str("owner") == "guarded" })
	testkit.Throughout(t, 5500*time.Millisecond, "the waiting group keeps x1", func() bool { return w.state(0, "x1").Str("owner") == "guarded" })
	assert.Equal(t, false, w.state(0, "x1").JSON()["watchdog"], "no watchdog renews a member before the group's grant")
	require.Equal(t, http.StatusOK, w.replica(0).Do(http.MethodDelete, "/locks/x2", testkit.TokenHeader(blocker.Str("token")), "").Status)
	g := testkit.Receive(t, ch, 10*time.Second, "the group's grant")
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	granted := time.Now()
	for _, name := range []string{"x1", "x2"} {
		st := w.state(0, name)
		assert.Equal(t, true, st.JSON()["watchdog"], name)
		// Counted from when x1 was taken, over 5 s ago, none would be left.
		assert.Greater(t, st.Int("max_hold_ms"), int64(3000), "%s: max hold counted from the grant", name)
	}
	testkit.Throughout(t, 2500*time.Millisecond, "the watchdog renews both members past their 2 s TTL", func() bool {
		return w.state(0, "x1").Str("multilock") == g.Str("id") && w.state(0, "x2").Str("multilock") == g.Str("id")
	})
	w.awaitFree(t, 0, "x1", 10*time.Second)
	w.awaitFree(t, 0, "x2", 2*time.Second)
	// granted is when the answer arrived, after the grant: a loaded machine may take a while.
	assert.Greater(t, time.Since(granted), 4*time.Second, "not before its max hold")
}

// TestMultiLockWaiterRidesOutARedisStall: a waiting group that holds a member rides out Redis not
// answering (DEBUG SLEEP) and is granted once the member it waits for is free, as a single waiter
// would be; it does not give up with 503.
func TestMultiLockWaiterRidesOutARedisStall(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	blocker := w.replica(0).Do(http.MethodPost, "/locks/y2", nil, testkit.AcquireBody("blocker", 60000))
	require.Equal(t, http.StatusCreated, blocker.Status)
	ch := make(chan *harness.Response, 1)
	go func() { ch <- testkit.LockAll(w.replica(1), "patient", []string{"y1", "y2"}, 3000, 30000, "") }()
	harness.Eventually(t, 5*time.Second, "y1 taken by the waiting group", func() bool { return w.state(0, "y1").Str("owner") == "patient" })
	// Redis answers nobody for 5 s: longer than a slice (1 s) and than the gateway's bound on a
	// stalled connection (3 s), so calls fail meanwhile.
	w.redis.MustDo(t, "DEBUG", "SLEEP", "5")
	select {
	case r := <-ch:
		t.Fatalf("the group answered during the stall: %d %s", r.Status, r.Body)
	default:
	}
	// The replica's connections reconnect after the stall: retry the release with one
	// Idempotency-Key until it answers.
	h := harness.Headers{"Lease-Token": blocker.Str("token"), "Idempotency-Key": "release-y2"}
	var r *harness.Response
	harness.Eventually(t, 10*time.Second, "the blocker's release goes through", func() bool {
		r = w.replica(0).Do(http.MethodDelete, "/locks/y2", h, "")
		return r.Status != http.StatusServiceUnavailable
	})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	g := testkit.Receive(t, ch, 15*time.Second, "the group's grant")
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	assert.Equal(t, g.Str("id"), w.state(0, "y1").Str("multilock"))
	assert.Equal(t, g.Str("id"), w.state(0, "y2").Str("multilock"))
}

// TestMultiLockWaitEndedByShutdownKeepsItsPlace: a group waiting in a member's line on a replica
// that shuts down is answered 503 with a group queue ticket, holds nothing, and resumes with it on
// the other replica ahead of a single waiter that came meanwhile, as a single waiter resumes with
// its own ticket.
func TestMultiLockWaitEndedByShutdownKeepsItsPlace(t *testing.T) {
	t.Parallel()
	w := newMultiWorld(t)
	a, b := "shut.a", "shut.b"
	holder := w.replica(0).Do(http.MethodPost, "/locks/"+b, nil, testkit.AcquireBody("holder", 60000))
	require.Equal(t, http.StatusCreated, holder.Status, "%s", holder.Body)

	waiting := make(chan *harness.Response, 1)
	go func() { waiting <- testkit.LockAll(w.replica(1), "group", []string{a, b}, 60000, 30000, "") }()
	harness.Eventually(t, 5*time.Second, "the group in b's line, holding a", func() bool {
		return w.state(0, b).Int("waiters") == 1 && w.state(0, a).Str("owner") == "group"
	})
	later := make(chan *harness.Response, 1)
	go func() {
		later <- w.replica(0).Do(http.MethodPost, "/locks/"+b, nil, testkit.WaitBody("later", 60000, 15000))
	}()
	harness.Eventually(t, 5*time.Second, "the later waiter in b's line", func() bool { return w.state(0, b).Int("waiters") == 2 })

	require.NoError(t, w.gws[1].Stop())
	r := testkit.Receive(t, waiting, 10*time.Second, "the group's answer on shutdown")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	ticket := r.Str("queue_ticket")
	require.NotEmpty(t, ticket, "a group ended by shutdown in a member's line gets a group ticket: %s", r.Body)
	w.awaitFree(t, 0, a, time.Second) // nothing is held between requests

	resumed := make(chan *harness.Response, 1)
	go func() {
		resumed <- testkit.LockAll(w.replica(0), "group", []string{a, b}, 60000, 15000, fmt.Sprintf(`,"queue_ticket":%q`, ticket))
	}()
	harness.Eventually(t, 5*time.Second, "the group back ahead of the later waiter", func() bool {
		ws := testkit.Waiting(w.replica(0), b)
		return len(ws) == 2 && ws[0].Multilock != "" && ws[1].Owner == "later"
	})
	require.Equal(t, http.StatusOK, w.replica(0).Do(http.MethodDelete, "/locks/"+b, testkit.TokenHeader(holder.Str("token")), "").Status)
	g := testkit.Receive(t, resumed, 5*time.Second, "the group's grant")
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	select {
	case got := <-later:
		t.Fatalf("the later waiter was answered before the group: %s", got.Body)
	default:
	}
	require.Equal(t, http.StatusOK, releaseGroup(w.replica(0), "/multilocks", g.Str("token")).Status)
	l := testkit.Receive(t, later, 5*time.Second, "b for the later waiter")
	require.Equal(t, http.StatusCreated, l.Status, "%s", l.Body)
}
