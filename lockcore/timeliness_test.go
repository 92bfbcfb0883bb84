package lockcore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// Timeliness (docs/waiting.md, "Answered in time"): a waiting acquire is answered by its wait plus
// answerGrace whatever Redis does, a grant is answered only while at least half its TTL is left,
// and a waiter whose replica is starved of CPU keeps its place in line.

// answerGrace is lockcore's bound on an answer past its wait (wait.go), and answerSlack this loaded
// machine's own scheduling on top of it (the race detector, other packages' tests).
const (
	answerGrace = 500 * time.Millisecond
	answerSlack = 500 * time.Millisecond
)

// TestWaitIsAnsweredInTimeWhileRedisIsPaused pauses Redis (CLIENT PAUSE ALL) while a waiter waits,
// for longer than its wait: its answer must come by the wait plus answerGrace, not when Redis
// answers again, and once Redis is back the waiter has left the line (its dequeue, sent into the
// pause, lands then: the pause is shorter than the client's 3 s bound on a stalled connection).
func TestWaitIsAnsweredInTimeWhileRedisIsPaused(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	const lock = "paused"
	w.hold(t, w.svc, lock, "holder", time.Minute)
	const wait = 800 * time.Millisecond
	start := time.Now()
	res := acquireAsync(context.Background(), w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: wait})
	w.awaitWaiters(t, lock, 1)
	w.redis.MustDo(t, "CLIENT", "PAUSE", "2500", "ALL")
	r := receive(t, res, 10*time.Second, "the waiter's answer")
	took := time.Since(start)
	var held *lockcore.HeldError
	require.ErrorAs(t, r.err, &held, "the wait ran out")
	assert.Less(t, took, wait+answerGrace+answerSlack, "answered by the wait plus answerGrace, while Redis was paused for 2.5 s")
	t.Logf("a wait of %v answered after %v with Redis paused", wait, took.Round(time.Millisecond))
	pollUntil(t, 10*time.Second, "the waiter gone from the line once Redis answers", func() bool {
		return w.redis.MustDo(t, "ZCARD", w.key(lock, ":q")) == "0"
	})
}

// TestGrantAnsweredTooLateIsGivenBack pauses Redis's writes for most of a short TTL just before an
// acquire that does not wait: Redis grants it when the pause ends, with less than half its TTL
// left, so the acquire answers ErrUnavailable and gives the lock back. A waiting acquire in the
// same spot confirms its grant again and answers it fresh.
func TestGrantAnsweredTooLateIsGivenBack(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	const ttl = 1200 * time.Millisecond
	pause := strconv.FormatInt((ttl * 3 / 4).Milliseconds(), 10)

	w.redis.MustDo(t, "CLIENT", "PAUSE", pause, "WRITE")
	_, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "late", Owner: "late", TTL: ttl})
	require.ErrorIs(t, err, lockcore.ErrUnavailable, "a grant with less than half its TTL left is not answered")
	assert.Equal(t, "0", w.redis.MustDo(t, "EXISTS", w.key("late", "")), "and it was given back")

	w.redis.MustDo(t, "CLIENT", "PAUSE", pause, "WRITE")
	g, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "late-waiter", Owner: "late", TTL: ttl, Wait: 5 * time.Second})
	require.NoError(t, err)
	left := time.Until(g.ExpiresAt)
	assert.GreaterOrEqual(t, left, ttl/2-answerSlack/5, "answered with at least about half its TTL left")
	pttl, err := strconv.Atoi(w.redis.MustDo(t, "PTTL", w.key("late-waiter", "")))
	require.NoError(t, err)
	assert.Greater(t, time.Duration(pttl)*time.Millisecond, ttl/4, "and Redis holds it that long")
}

// TestStarvedReplicasWaiterKeepsItsPlace queues a waiter on a replica whose heartbeat does not come
// (as when its process is starved of CPU), and makes its entry's liveness deadline pass; a
// newcomer queues behind it. While its replica still listens on its grants channel, the release
// hands the lock to the starved waiter, not to the newcomer. An entry of a replica that no longer
// listens (a dead one), just past its deadline, is skipped at once.
func TestStarvedReplicasWaiterKeepsItsPlace(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	starved := w.replica(t, lockcore.Options{Heartbeat: time.Hour, Liveness: 2 * time.Hour})
	ctx := context.Background()
	const lock = "starved"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)
	first := acquireAsync(ctx, starved, lockcore.AcquireRequest{Lock: lock, Owner: "starved", TTL: time.Minute, Wait: 20 * time.Second})
	w.awaitWaiters(t, lock, 1)
	lease := w.redis.MustDo(t, "ZRANGE", w.key(lock, ":q"), "0", "0")
	// Its heartbeat is a second late (the liveness window of the releasing replica is 750 ms).
	late := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
	w.redis.MustDo(t, "ZADD", w.key(lock, ":qd"), "XX", late, lease)
	newcomer := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "newcomer", TTL: time.Minute, Wait: 20 * time.Second})
	pollUntil(t, 10*time.Second, "the newcomer queued", func() bool { return w.redis.MustDo(t, "ZCARD", w.key(lock, ":q")) == "2" })

	_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
	require.NoError(t, err)
	r := receive(t, first, 10*time.Second, "the starved waiter's grant")
	require.NoError(t, r.err, "the starved waiter keeps its place")
	select {
	case n := <-newcomer:
		t.Fatalf("the newcomer was answered (%v) while the starved waiter holds the lock", n.err)
	default:
	}

	// A dead replica's entry (nobody listens on "gone"), 100 ms past its deadline, ahead of the
	// newcomer: the release passes it over.
	past := strconv.FormatInt(time.Now().Add(-100*time.Millisecond).UnixMilli(), 10)
	const dead = "00000000-0000-4000-8000-000000000001"
	w.redis.MustDo(t, "ZADD", w.key(lock, ":q"), "1", dead)
	w.redis.MustDo(t, "ZADD", w.key(lock, ":qd"), past, dead)
	w.redis.MustDo(t, "HSET", w.key(lock, ":qm"), dead, `{"r":"gone","o":"dead","t":"60000","w":"0","h":"0"}`)
	released := time.Now()
	_, err = starved.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
	require.NoError(t, err)
	n := receive(t, newcomer, 10*time.Second, "the newcomer's grant")
	require.NoError(t, n.err)
	assert.Less(t, time.Since(released), time.Second, "the dead replica's waiter was passed over, not handed a claim")
}
