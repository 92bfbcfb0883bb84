package lockcore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
	"github.com/leasegate/leasegate/luascripts"
)

// evalQueued runs acquire.lua on lock straight on Redis, as a replica whose reply was lost (or a
// replica that then died) would have: all of lock's keys, no queue ticket and no Idempotency-Key,
// the common arguments (claim and liveness of 750 ms, fence TTL of a day), then args (and an
// idem_ms of 0).
func (w *waitWorld) evalQueued(t *testing.T, script, lock string, args ...string) string {
	t.Helper()
	cmd := []string{"EVAL", script, "10", w.key(lock, ""), w.prefix + "fence", w.key(lock, ":q"),
		w.key(lock, ":qd"), w.key(lock, ":qm"), w.key(lock, ":sh"), w.key(lock, ":shm"), w.key(lock, ""), w.key(lock, ":ticket:"),
		w.key(lock, ":idem:"), w.prefix + "grants:", "750", "750", "86400000", "", "l"}
	return w.redis.MustDo(t, append(append(cmd, args...), "0", "x", "0")...)
}

// TestHolderIsNeverQueuedBehindItself replays a waiting enqueue of the lease that holds the lock
// (a retried call whose first reply was lost, or a requeue racing the grant). The lease must not
// join its own queue: otherwise its release hands the lock straight back to it and the released
// token works again.
func TestHolderIsNeverQueuedBehindItself(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "ghost"
	g := w.hold(t, w.svc, lock, "holder", time.Minute)

	reply := w.evalQueued(t, luascripts.Acquire, lock,
		g.ID, "60000", "holder", "0", "wait", "some-replica", "0", "0")
	assert.Equal(t, "1\n"+strconv.FormatInt(g.Fence, 10)+"\n0", reply, "the holder is told it holds the lock, with its fence")
	assert.Equal(t, "0", w.queueKeys(t, lock), "the holder is not in the queue")

	rel, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: g.Token})
	require.NoError(t, err)
	assert.True(t, rel.Released)
	st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
	require.NoError(t, err)
	assert.False(t, st.Held(), "released means free: %+v", st)
	_, err = w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: g.Token})
	assert.ErrorIs(t, err, lockcore.ErrLeaseLost, "a released token never works again")
	_, err = w.svc.Renew(ctx, lockcore.LockRef(lock), g.Token, time.Minute)
	assert.ErrorIs(t, err, lockcore.ErrLeaseLost, "nor renews the lock back")
}

// TestReleaseDropsTheReleasingLeaseFromTheQueue puts the holder's lease into the queue by hand,
// as a ghost entry from before the acquire fix would be, and releases: the lock must go to the
// real waiter behind it, never back to the lease that released it.
func TestReleaseDropsTheReleasingLeaseFromTheQueue(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "ghost-entry"
	g := w.hold(t, w.svc, lock, "holder", time.Minute)
	res := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)
	far := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	w.redis.MustDo(t, "ZADD", w.key(lock, ":q"), "1", g.ID) // ahead of everyone
	w.redis.MustDo(t, "ZADD", w.key(lock, ":qd"), far, g.ID)
	w.redis.MustDo(t, "HSET", w.key(lock, ":qm"), g.ID, `{"r":"x","o":"holder","t":"60000","w":"0","h":"0"}`)

	_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: g.Token})
	require.NoError(t, err)
	_, err = w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: g.Token})
	assert.ErrorIs(t, err, lockcore.ErrLeaseLost, "the released lease got nothing back")
	r := receive(t, res, 10*time.Second, "the real waiter's grant")
	require.NoError(t, r.err)
	assert.Equal(t, "waiter", r.grant.Owner)
}

// TestManyWaitersOnOneLockStayInLine queues thousands of waiters for one lock on one replica (more
// than one Lua call can unpack, so the heartbeat must chunk) and checks that every one of them is
// still in line several liveness windows later, and that the lock then goes to them in arrival
// order. The race detector caps live goroutines at 8128, so with -race the test uses 5,000
// waiters (still past the ~4,000 where an unchunked heartbeat failed).
//
// It runs alone, not in parallel: with -race, the goroutines of tests beside it count toward that
// cap too, and its bursts (5,000 enqueues, then 5,000 cancellations) took the test process's CPU
// for seconds on a loaded machine, long enough for tests beside it to miss one-second dials and
// sub-second TTLs.
func TestManyWaitersOnOneLockStayInLine(t *testing.T) {
	n := 10000
	if harness.RaceEnabled {
		n = 5000
	}
	// The heartbeat's times at six times their defaults (250 ms, 750 ms, 750 ms): this test is
	// about every waiter staying in line, not about how soon a late one drops out of the count.
	// On a loaded 2-core machine under -race, keepalive calls for the 5,000 came up to 2.5 s apart
	// (measured with an Observer, most of it right after the enqueue burst), and a waiter queued
	// while a call was on its way has only its enqueue's deadline until the next call: with the
	// default 750 ms, Inspect's count of the waiters within their deadline fell below 5,000: to
	// 4,830 in one run, with all 5,000 still queued (a late entry keeps its place while its
	// replica listens), and to 0 in another.
	const heartbeat, liveness = 1500 * time.Millisecond, 4500 * time.Millisecond
	w := newWaitWorld(t, lockcore.Options{MaxWaiters: n, Heartbeat: heartbeat, Liveness: liveness, ClaimTTL: liveness})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lock = "crowd"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)
	results := make(chan acquired, n)
	for i := 0; i < n; i++ {
		go func() {
			g, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
			results <- acquired{g, err}
		}()
	}
	pollUntil(t, 60*time.Second, fmt.Sprintf("%d waiters queued", n), func() bool {
		st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
		return err == nil && st.Waiters == int64(n)
	})
	// Four liveness windows: a waiter whose keepalive failed (as an unchunked one did) drops out
	// of the count one window after it queued, and stays out. A keepalive call late on a loaded
	// machine (-race and a busy core: 4,915 of 5,000 counted once, all 5,000 queued) lets some
	// deadlines pass until it lands; so the count must be whole again within a liveness window.
	lowest, whole := int64(n), time.Now()
	for end := time.Now().Add(4 * liveness); time.Now().Before(end); <-time.After(heartbeat / 4) {
		st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
		require.NoError(t, err)
		if st.Waiters == int64(n) {
			whole = time.Now()
			continue
		}
		lowest = min(lowest, st.Waiters)
		if time.Since(whole) > liveness {
			require.Failf(t, "every waiter stays in line", "%d of %d waiters within their liveness deadline for %v, %s queued",
				st.Waiters, n, time.Since(whole).Round(time.Millisecond), w.redis.MustDo(t, "ZCARD", w.key(lock, ":q")))
		}
	}
	t.Logf("waiters within their liveness deadline: at least %d of %d at every look", lowest, n)
	q := w.redis.MustDo(t, "ZCARD", w.key(lock, ":q"))
	require.Equal(t, strconv.Itoa(n), q)

	// FIFO: the first five in the queue get the lock in that order.
	head := strings.Split(w.redis.MustDo(t, "ZRANGE", w.key(lock, ":q"), "0", "4"), "\n")
	token := holder.Token
	for i, want := range head {
		_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: token})
		require.NoError(t, err)
		r := receive(t, results, 10*time.Second, fmt.Sprintf("grant %d", i))
		require.NoError(t, r.err)
		assert.Equal(t, want, r.grant.ID, "grant %d goes to the queue's head", i)
		token = r.grant.Token
	}
	cancel()
	for i := len(head); i < n; i++ {
		r := receive(t, results, 30*time.Second, "the cancelled waiters")
		if r.err == nil {
			t.Fatalf("a cancelled waiter was granted")
		}
	}
}

// TestHeartbeatFollowsAChangingCrowd: a lock's heartbeat keeps its call's arguments from one beat
// to the next (waiters.go). While most of a crowd leaves and others join between beats, every
// waiter still here stays in line through several liveness windows, none that left comes back,
// and the lock then goes to those still waiting in arrival order.
func TestHeartbeatFollowsAChangingCrowd(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "churn"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)
	type waiting struct {
		cancel context.CancelFunc
		res    <-chan acquired
	}
	first := make([]waiting, 300)
	for i := range first { // one at a time: their order in line is known
		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		first[i] = waiting{cancel, acquireAsync(wctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "first", TTL: time.Minute, Wait: time.Minute})}
		w.awaitWaiters(t, lock, int64(i+1))
	}
	for _, x := range first[10:] { // the crowd shrinks to 10 between beats
		x.cancel()
	}
	for i, x := range first[10:] {
		r := receive(t, x.res, 10*time.Second, fmt.Sprintf("cancelled waiter %d", i))
		require.ErrorIs(t, r.err, context.Canceled)
	}
	w.awaitWaiters(t, lock, 10)
	secondCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	second := make(chan acquired, 50)
	for range 50 { // and grows to 60
		go func() {
			g, err := w.svc.Acquire(secondCtx, lockcore.AcquireRequest{Lock: lock, Owner: "second", TTL: time.Minute, Wait: time.Minute})
			second <- acquired{g, err}
		}()
	}
	w.awaitWaiters(t, lock, 60)
	// Four liveness windows: an entry the heartbeat stopped refreshing would have been pruned, and
	// one it kept refreshing for a waiter that left would still count.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-time.After(250 * time.Millisecond) {
		st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
		require.NoError(t, err)
		require.Equal(t, int64(60), st.Waiters, "every waiter still here stays in line, and only they")
	}
	require.Equal(t, "60", w.redis.MustDo(t, "ZCARD", w.key(lock, ":q")))

	token := holder.Token
	for i := range 60 {
		_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: token})
		require.NoError(t, err)
		res := (<-chan acquired)(second)
		if i < 10 {
			res = first[i].res
		}
		r := receive(t, res, 10*time.Second, fmt.Sprintf("grant %d", i))
		require.NoError(t, r.err)
		want := "first"
		if i >= 10 {
			want = "second"
		}
		require.Equal(t, want, r.grant.Owner, "grant %d goes to the longest waiting", i)
		token = r.grant.Token
	}
}

// TestDeadReplicasQueueExpires queues a waiter the way a replica does and never refreshes it, as
// when that replica dies: the queue keys must leave Redis by themselves (ten liveness windows
// after the last enqueue or heartbeat), even though nobody touches the lock again.
func TestDeadReplicasQueueExpires(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	const lock = "orphan"
	w.hold(t, w.svc, lock, "holder", time.Minute)
	reply := w.evalQueued(t, luascripts.Acquire, lock,
		"3f0c7d0e-3f8e-4a57-9a3c-2f4e8f9b1c11", "60000", "waiter", "0", "wait", "dead-replica", "0", "0")
	require.True(t, strings.HasPrefix(reply, "2\n"), "queued: %q", reply)
	require.Equal(t, "3", w.queueKeys(t, lock))
	pollUntil(t, 15*time.Second, "the dead replica's queue keys to expire", func() bool {
		return w.queueKeys(t, lock) == "0"
	})
	assert.Equal(t, "holder", w.redis.MustDo(t, "HGET", w.key(lock, ""), ":owner"), "the lock itself is untouched")
}

// TestTooManyWaitersIsRefused fills a replica's cap of waiting requests.
func TestTooManyWaitersIsRefused(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{MaxWaiters: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lock = "capped"
	w.hold(t, w.svc, lock, "holder", time.Minute)
	req := lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute}
	a, b := acquireAsync(ctx, w.svc, req), acquireAsync(ctx, w.svc, req)
	w.awaitWaiters(t, lock, 2)
	_, err := w.svc.Acquire(ctx, req)
	assert.ErrorIs(t, err, lockcore.ErrTooManyWaiters)
	_, err = w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: lock, Owner: "try-once", TTL: time.Minute})
	assert.ErrorIs(t, err, lockcore.ErrHeld, "try-once requests are not capped")
	cancel()
	for _, ch := range []<-chan acquired{a, b} {
		assert.ErrorIs(t, receive(t, ch, 5*time.Second, "a cancelled waiter").err, context.Canceled)
	}
	w.awaitWaiters(t, lock, 0)
	_, err = w.svc.Acquire(context.Background(), lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: 10 * time.Millisecond})
	assert.ErrorIs(t, err, lockcore.ErrHeld, "below the cap again, waiting is allowed")
}

// TestQueueTicketKeepsThePlace has a patient waiter whose long-polls run out every 200 ms while
// newcomers keep arriving: with its queue ticket each new poll resumes its original arrival, so it
// is granted the lock before all of them.
func TestQueueTicketKeepsThePlace(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	other := w.replica(t, lockcore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lock = "patient"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)

	patient := make(chan acquired, 1)
	polls := make(chan struct{}, 100)
	go func() {
		ticket := ""
		for ctx.Err() == nil {
			g, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: lock, Owner: "patient", TTL: time.Minute,
				Wait: 200 * time.Millisecond, QueueTicket: ticket})
			var held *lockcore.HeldError
			if errors.As(err, &held) && held.Waited > 0 {
				ticket = held.QueueTicket
				polls <- struct{}{}
				continue
			}
			patient <- acquired{g, err}
			return
		}
	}()
	w.awaitWaiters(t, lock, 1)

	const newcomers = 20
	late := make(chan acquired, newcomers)
	for i := range newcomers {
		go func() {
			g, err := other.Acquire(ctx, lockcore.AcquireRequest{Lock: lock, Owner: fmt.Sprintf("newcomer-%d", i), TTL: time.Minute, Wait: time.Minute})
			late <- acquired{g, err}
		}()
	}
	pollUntil(t, 10*time.Second, "the newcomers to queue", func() bool {
		st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
		return err == nil && st.Waiters >= newcomers
	})
	// Let the patient waiter re-poll a few times behind the newcomers' arrival, then release right
	// after it is back in line (well within its next 200 ms poll).
	for range 3 {
		receive(t, polls, 5*time.Second, "a re-poll")
	}
	pollUntil(t, 5*time.Second, "the patient waiter back in line", func() bool {
		st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
		return err == nil && st.Waiters == newcomers+1
	})
	_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
	require.NoError(t, err)
	r := receive(t, patient, 10*time.Second, "the patient waiter's grant")
	require.NoError(t, r.err, "the patient waiter is granted first")
	assert.Equal(t, "patient", r.grant.Owner)
	select {
	case l := <-late:
		t.Fatalf("a newcomer was granted before the patient waiter released: %+v", l)
	default:
	}
	_, err = w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
	require.NoError(t, err)
	first := receive(t, late, 10*time.Second, "the first newcomer's grant")
	require.NoError(t, first.err)
}

// TestQueueTicketChecks rejects tickets handed to another lock or owner, and ignores (queues as a
// newcomer) one that does not verify: altered, or signed by a replica with another secret.
func TestQueueTicketChecks(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	w.hold(t, w.svc, "a", "holder", time.Minute)
	ticketFor := func() string {
		_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "a", Owner: "me", TTL: time.Minute, Wait: 10 * time.Millisecond})
		var held *lockcore.HeldError
		require.ErrorAs(t, err, &held)
		require.NotEmpty(t, held.QueueTicket)
		return held.QueueTicket
	}
	for name, req := range map[string]lockcore.AcquireRequest{
		"other lock":  {Lock: "b", Owner: "me", QueueTicket: ticketFor()},
		"other owner": {Lock: "a", Owner: "you", QueueTicket: ticketFor()},
	} {
		req.TTL, req.Wait = time.Minute, time.Second
		_, err := w.svc.Acquire(ctx, req)
		assert.ErrorIs(t, err, lockcore.ErrInvalidTicket, name)
	}
	for name, tk := range map[string]string{
		"altered":     harness.AlterSignature(ticketFor()),
		"lease token": w.hold(t, w.svc, "c", "me", time.Minute).Token,
	} {
		_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "a", Owner: "me", TTL: time.Minute, Wait: 10 * time.Millisecond, QueueTicket: tk})
		var held *lockcore.HeldError
		assert.ErrorAs(t, err, &held, "%s: ignored, the request waits as a newcomer", name)
	}
}

// TestQueueTicketBoundToItsPrincipal: a ticket handed to one principal is refused to another, even
// with its owner string (it would take the first principal's place in line); a ticket handed to no
// principal (minted with authentication off, or by an older build) presented by an authenticated
// caller is ignored: it queues as a newcomer.
func TestQueueTicketBoundToItsPrincipal(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	w.hold(t, w.svc, "a", "holder", time.Minute)
	ticketFor := func(principal string) string {
		_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "a", Owner: "me", TTL: time.Minute, Wait: 10 * time.Millisecond,
			Principal: principal})
		var held *lockcore.HeldError
		require.ErrorAs(t, err, &held)
		require.NotEmpty(t, held.QueueTicket)
		return held.QueueTicket
	}
	for name, principal := range map[string]string{"another principal": "mallory", "no principal": ""} {
		_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "a", Owner: "me", TTL: time.Minute, Wait: time.Second,
			Principal: principal, QueueTicket: ticketFor("alice")})
		assert.ErrorIs(t, err, lockcore.ErrInvalidTicket, name)
	}
	_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "a", Owner: "me", TTL: time.Minute, Wait: 10 * time.Millisecond,
		Principal: "alice", QueueTicket: ticketFor("")})
	var held *lockcore.HeldError
	assert.ErrorAs(t, err, &held, "a ticket of no principal is ignored: the request waits as a newcomer")
	_, err = w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "a", Owner: "me", TTL: time.Minute, Wait: 10 * time.Millisecond,
		Principal: "alice", QueueTicket: ticketFor("alice")})
	assert.ErrorAs(t, err, &held, "its own principal's ticket is taken")
}

// TestQueueTicketWorksOnce presents one ticket twice: the first request resumes the ticket's early
// place, ahead of a waiter that came after it; the second (a copy) queues as a newcomer, behind.
func TestQueueTicketWorksOnce(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lock = "once"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)
	_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: lock, Owner: "me", TTL: time.Minute, Wait: 10 * time.Millisecond})
	var held *lockcore.HeldError
	require.ErrorAs(t, err, &held)

	later := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "later", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)
	resumed := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "me", TTL: time.Minute, Wait: time.Minute, QueueTicket: held.QueueTicket})
	w.awaitWaiters(t, lock, 2)
	copied := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "me", TTL: time.Minute, Wait: time.Minute, QueueTicket: held.QueueTicket})
	w.awaitWaiters(t, lock, 3)

	token := holder.Token
	for i, ch := range []<-chan acquired{resumed, later, copied} {
		_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: token})
		require.NoError(t, err)
		r := receive(t, ch, 10*time.Second, fmt.Sprintf("grant %d in order resumed, later, copy", i))
		require.NoError(t, r.err)
		token = r.grant.Token
	}
}

// TestDeadWaitersAheadAreSkipped puts 150 dead entries (their replica's heartbeat stopped) ahead of
// a live waiter, ordered so that pruning by deadline (a hundred at a time) leaves dead ones at the
// head. A release must still hand the lock to the live waiter at once, not to a dead head whose
// unconfirmed claim would stall the lock for the claim TTL.
func TestDeadWaitersAheadAreSkipped(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{ClaimTTL: 5 * time.Second})
	ctx := context.Background()
	const lock = "dead-ahead"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)
	past := time.Now().Add(-time.Minute).UnixMilli()
	for i := range 150 {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		// Earliest arrivals get the latest (still past) deadlines, so they survive the first prune.
		w.redis.MustDo(t, "ZADD", w.key(lock, ":q"), strconv.Itoa(1+i), id)
		w.redis.MustDo(t, "ZADD", w.key(lock, ":qd"), strconv.FormatInt(past-int64(i), 10), id)
		w.redis.MustDo(t, "HSET", w.key(lock, ":qm"), id, `{"r":"dead","o":"dead","t":"60000","w":"0","h":"0"}`)
	}
	res := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "live", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1) // live entries only
	released := time.Now()
	_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
	require.NoError(t, err)
	r := receive(t, res, 10*time.Second, "the live waiter's grant")
	require.NoError(t, r.err)
	assert.Less(t, time.Since(released), 2*time.Second, "granted without waiting out a 5 s claim on a dead head")
}

// TestListShowsWhoWaits lists a lock with a line: a dead replica's entry at its head (never
// refreshed, so past its liveness deadline), then a shared and an exclusive waiter. List reports
// the live ones, in line order, with their owners, modes and arrivals; Inspect reports none.
func TestListShowsWhoWaits(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lock = "line"
	w.hold(t, w.svc, lock, "holder", time.Minute)
	reply := w.evalQueued(t, luascripts.Acquire, lock,
		"9d7e4c55-0f5b-4b0e-8d5e-6a1f3c2b7e10", "60000", "ghost", "0", "wait", "dead-replica", "0", "0")
	require.True(t, strings.HasPrefix(reply, "2\n"), "queued: %q", reply)
	w.awaitWaiters(t, lock, 0) // its liveness deadline (750 ms) passed; the entry stays until pruned

	before := time.Now()
	reader := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Mode: lockcore.Shared, Owner: "reader-1", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)
	writer := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "writer-2", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 2)

	states, next, err := w.svc.List(ctx, lockcore.KindLock, lock, "", 10)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, states, 1)
	st := states[0]
	assert.Equal(t, int64(2), st.Waiters)
	require.Len(t, st.Waiting, 2, "the live waiters, not the dead replica's: %+v", st.Waiting)
	assert.Equal(t, "reader-1", st.Waiting[0].Owner)
	assert.Equal(t, lockcore.Shared, st.Waiting[0].Mode)
	assert.Equal(t, "writer-2", st.Waiting[1].Owner)
	assert.Equal(t, lockcore.Exclusive, st.Waiting[1].Mode)
	for _, wt := range st.Waiting {
		assert.Empty(t, lockcore.GroupOf(wt.Lease), "a lease of its own")
		assert.WithinDuration(t, before, wt.Since, 2*time.Second, "%s's arrival, on Redis's clock", wt.Owner)
		assert.Greater(t, wt.Waited, time.Duration(0))
	}
	assert.False(t, st.Waiting[1].Since.Before(st.Waiting[0].Since), "line order")

	plain, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
	require.NoError(t, err)
	assert.Nil(t, plain.Waiting, "Inspect does not read the line")

	cancel()
	for _, ch := range []<-chan acquired{reader, writer} {
		r := receive(t, ch, 10*time.Second, "a waiter gives up")
		assert.ErrorIs(t, r.err, context.Canceled)
	}
}

// TestAJoinBehindAnExclusiveHolderIsAcquireLuasJoin checks acquire_join_fast.lua (a wait behind
// an exclusive holder, before lib.lua's helpers) against acquire.lua's own wait path, which a lock
// whose events someone streams still takes: the same reply and the same queue entry (q, qd, qm
// and their TTLs), for a newcomer and for a waiter queueing again with its arrival.
func TestAJoinBehindAnExclusiveHolderIsAcquireLuasJoin(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	const fast, full = "join-fast", "join-full"
	type joined struct {
		reply              []string
		arrival            int64
		deadlineIn         int64 // qd's score minus the Redis clock, ms
		meta               map[string]any
		qTTL, qdTTL, qmTTL int64
	}
	join := func(lock, lease, arrival string) joined {
		reply := strings.Split(w.evalQueued(t, luascripts.Acquire, lock, lease, "60000", "waiter", "1", "wait", "replica-1", arrival, "5000"), "\n")
		require.Len(t, reply, 3, "queued: {2, ms, arrival}")
		now, err := w.redis.DoList("TIME")
		require.NoError(t, err)
		sec, _ := strconv.ParseInt(now[0], 10, 64)
		usec, _ := strconv.ParseInt(now[1], 10, 64)
		var j joined
		j.reply = reply
		j.arrival, _ = strconv.ParseInt(w.redis.MustDo(t, "ZSCORE", w.key(lock, ":q"), lease), 10, 64)
		deadline, _ := strconv.ParseInt(w.redis.MustDo(t, "ZSCORE", w.key(lock, ":qd"), lease), 10, 64)
		j.deadlineIn = deadline - (sec*1000 + usec/1000)
		require.NoError(t, json.Unmarshal([]byte(w.redis.MustDo(t, "HGET", w.key(lock, ":qm"), lease)), &j.meta))
		for key, ttl := range map[string]*int64{":q": &j.qTTL, ":qd": &j.qdTTL, ":qm": &j.qmTTL} {
			*ttl, _ = strconv.ParseInt(w.redis.MustDo(t, "PTTL", w.key(lock, key)), 10, 64)
		}
		return j
	}
	for _, lock := range []string{fast, full} {
		w.hold(t, w.svc, lock, "holder", time.Minute)
	}
	w.redis.MustDo(t, "HSET", w.key(full, "")+":watch", ":epoch", "1") // watched: acquire.lua's path

	a, b := join(fast, "lease-a", "0"), join(full, "lease-b", "0")
	for _, j := range []joined{a, b} {
		assert.Equal(t, "2", j.reply[0])
		ms, _ := strconv.ParseInt(j.reply[1], 10, 64)
		assert.InDelta(t, 60000, ms, 5000, "until the holder's TTL runs out")
		assert.Equal(t, strconv.FormatInt(j.arrival, 10), j.reply[2], "the arrival to keep is the queue's")
		assert.InDelta(t, 750, j.deadlineIn, 250, "liveness deadline")
		for _, ttl := range []int64{j.qTTL, j.qdTTL, j.qmTTL} {
			assert.InDelta(t, 7500, ttl, 1000, "the queue keys live ten liveness windows")
		}
	}
	assert.Equal(t, b.meta, a.meta, "the same queue record")
	assert.InDelta(t, b.arrival, a.arrival, float64(10*time.Second/time.Microsecond), "arrivals from the Redis clock (µs)")

	// Queueing again with its arrival keeps it, on both paths; an earlier ticketless arrival too.
	again := join(fast, "lease-a", "12345")
	assert.Equal(t, a.arrival, again.arrival, "an earlier arrival is kept")
	assert.Equal(t, strconv.FormatInt(a.arrival, 10), again.reply[2])
	fresh := join(fast, "lease-c", "12345")
	assert.Equal(t, int64(12345), fresh.arrival, "a newcomer with an arrival to keep takes it")
	assert.Equal(t, int64(12345), join(full, "lease-d", "12345").arrival)
}
