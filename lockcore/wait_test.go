package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// waitWorld is one test's lockcore: its own redis-server, a fresh key prefix, and a Service.
type waitWorld struct {
	redis  *harness.Redis
	prefix string
	svc    *lockcore.Service
}

// newWaitWorld starts a redis-server and a Service on it. When t ends the Service is closed, then
// its client, then the server.
func newWaitWorld(t *testing.T, opts lockcore.Options) *waitWorld {
	t.Helper()
	w := &waitWorld{redis: harness.NewRedis(t, harness.RedisOptions{}), prefix: harness.RandomPrefix()}
	w.svc = w.replica(t, opts)
	return w
}

// replica starts another Service (as another gateway replica would be) on w's Redis and prefix,
// with a client of its own.
func (w *waitWorld) replica(t *testing.T, opts lockcore.Options) *lockcore.Service {
	t.Helper()
	opts.KeyPrefix = w.prefix
	return newServiceOn(t, lockcore.ClientOption(w.redis.Addr, ""), opts)
}

// newServiceOn starts a Service with opts on a client of its own made with clientOpts, both
// closed when the test ends.
func newServiceOn(t *testing.T, clientOpts rueidis.ClientOption, opts lockcore.Options) *lockcore.Service {
	t.Helper()
	client, err := rueidis.NewClient(clientOpts)
	require.NoError(t, err)
	tokens, err := lockcore.NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	svc, err := lockcore.New(client, tokens, opts)
	if err != nil {
		client.Close()
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		svc.Close()
		client.Close()
	})
	return svc
}

// key is the Redis key of lock with suffix ("" for the lock hash itself, ":q" for its queue...).
func (w *waitWorld) key(lock, suffix string) string { return w.prefix + "{" + lock + "}" + suffix }

// queueKeys counts how many of lock's queue keys (q, qd, qm) exist in Redis.
func (w *waitWorld) queueKeys(t *testing.T, lock string) string {
	t.Helper()
	return w.redis.MustDo(t, "EXISTS", w.key(lock, ":q"), w.key(lock, ":qd"), w.key(lock, ":qm"))
}

// hold acquires lock for owner (try-once) through svc.
func (w *waitWorld) hold(t *testing.T, svc *lockcore.Service, lock, owner string, ttl time.Duration) lockcore.Grant {
	t.Helper()
	g, err := svc.Acquire(context.Background(), lockcore.AcquireRequest{Lock: lock, Owner: owner, TTL: ttl})
	require.NoError(t, err, "%s acquires %q", owner, lock)
	return g
}

// awaitWaiters polls until Redis shows n live waiters queued for lock.
func (w *waitWorld) awaitWaiters(t *testing.T, lock string, n int64) {
	t.Helper()
	pollUntil(t, 10*time.Second, fmt.Sprintf("%d waiter(s) queued for %q", n, lock), func() bool {
		st, err := w.svc.Inspect(context.Background(), lockcore.LockRef(lock), "")
		return err == nil && st.Waiters == n
	})
}

// pollUntil waits for cond; see harness.Eventually. Test goroutine only.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	harness.Eventually(t, timeout, what, cond)
}

// acquired is the outcome of an Acquire run in another goroutine.
type acquired struct {
	grant lockcore.Grant
	err   error
}

// acquireAsync runs svc.Acquire in a goroutine; its outcome arrives on the returned channel.
func acquireAsync(ctx context.Context, svc *lockcore.Service, req lockcore.AcquireRequest) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		g, err := svc.Acquire(ctx, req)
		out <- acquired{g, err}
	}()
	return out
}

// receive returns the value ch delivers, failing t if none arrives within timeout.
func receive[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
		panic("unreachable")
	}
}

func TestCloseEndsWaitingAcquire(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	const lock = "closing"
	w.hold(t, w.svc, lock, "holder", time.Minute)
	res := acquireAsync(context.Background(), w.svc,
		lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)

	w.svc.Close()
	// "Promptly": well within the minute the waiter would otherwise wait.
	r := receive(t, res, 5*time.Second, "the waiting Acquire to end after Close")
	assert.ErrorIs(t, r.err, lockcore.ErrUnavailable)
	assert.ErrorIs(t, r.err, lockcore.ErrShuttingDown)
	var shutdown *lockcore.ShutdownError
	if assert.ErrorAs(t, r.err, &shutdown) {
		assert.NotEmpty(t, shutdown.QueueTicket, "the waiter can resume its place on another replica")
	}
	assert.Equal(t, lockcore.Grant{}, r.grant)
	assert.Equal(t, "0", w.queueKeys(t, lock), "the waiter left the queue (q, qd and qm are gone)")
	assert.Equal(t, "holder", w.redis.MustDo(t, "HGET", w.key(lock, ""), ":owner"), "Close releases nobody's lease")
}

func TestCancelledWaitLeavesQueueAndIsNeverGranted(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "cancel"
	holder := w.hold(t, w.svc, lock, "holder", time.Minute)
	waitCtx, cancel := context.WithCancel(ctx)
	res := acquireAsync(waitCtx, w.svc,
		lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)

	cancel()
	r := receive(t, res, 5*time.Second, "the cancelled Acquire to return")
	assert.ErrorIs(t, r.err, context.Canceled)
	assert.Equal(t, lockcore.Grant{}, r.grant)
	assert.Equal(t, "0", w.queueKeys(t, lock), "the waiter left the queue")

	rel, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
	require.NoError(t, err)
	assert.True(t, rel.Released)
	st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
	require.NoError(t, err)
	assert.False(t, st.Held(), "the lock was not handed to the waiter that left: %+v", st)
	assert.Zero(t, st.Waiters)
	assert.Equal(t, "0", w.redis.MustDo(t, "EXISTS", w.key(lock, "")))
}

// TestWaiterIsGrantedAfterRedisRestart restarts Redis under a waiting Acquire, a few times over
// (each round with a new Service, as a replica started since the last restart would be).
func TestWaiterIsGrantedAfterRedisRestart(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "restart"
	var lastFence int64
	for round := range 20 {
		svc := w.replica(t, lockcore.Options{})
		holder := w.hold(t, svc, lock, "holder", time.Minute)
		assert.Greater(t, holder.Fence, lastFence, "round %d", round)
		res := acquireAsync(ctx, svc,
			lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
		w.awaitWaiters(t, lock, 1)

		// The restarted server is empty: the holder's lease and the queue are gone. The waiter's
		// watch notices its entry is missing and queues it again, and the free lock goes to it.
		require.NoError(t, w.redis.Kill())
		require.NoError(t, w.redis.Restart())
		r := receive(t, res, 20*time.Second, fmt.Sprintf("round %d: the waiter's grant after the Redis restart", round))
		require.NoError(t, r.err, "round %d: the waiter is granted once Redis is back", round)
		assert.Equal(t, "waiter", r.grant.Owner)
		assert.Greater(t, r.grant.Fence, holder.Fence, "round %d: fences keep rising after the fence key was lost", round)
		lastFence = r.grant.Fence

		// Connections the restart broke fail their next command (the client does not retry), so
		// these checks retry ErrUnavailable as any caller would.
		var st lockcore.State
		require.NoError(t, retryUnavailable(func() (err error) {
			st, err = svc.Inspect(ctx, lockcore.LockRef(lock), r.grant.Token)
			return err
		}))
		require.NotNil(t, st.Yours)
		assert.True(t, *st.Yours, "round %d: Redis has the waiter as holder: %+v", round, st)
		require.NotNil(t, st.Exclusive)
		assert.Equal(t, r.grant.Fence, st.Exclusive.Fence)
		var rel lockcore.Released
		require.NoError(t, retryUnavailable(func() (err error) {
			rel, err = svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
			return err
		}))
		assert.True(t, rel.Released)
	}
}

// retryUnavailable calls fn until it returns something other than ErrUnavailable, for up to 10 s,
// and returns fn's last error. Callers use it only where ErrUnavailable means "never reached Redis"
// (a connection broken by a restart or a kill), so a retry cannot apply a write twice.
func retryUnavailable(fn func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if !errors.Is(err, lockcore.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		<-time.After(10 * time.Millisecond)
	}
}

func TestWaiterIsGrantedAfterPubSubConnectionIsKilled(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	other := w.replica(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "pubsub"
	holder := w.hold(t, other, lock, "holder", time.Minute)
	res := acquireAsync(ctx, w.svc,
		lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
	w.awaitWaiters(t, lock, 1)

	// With RESP3 the subscription shares the connection with commands, so this kills both
	// replicas' connections; the grant may be published before the waiter's replica re-subscribes.
	killed := w.redis.MustDo(t, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NotEqual(t, "0", killed, "the replicas' subscriptions were killed")

	// The holder's replica notices its dead connection on first use: an ErrUnavailable here means
	// the release never reached Redis, so it is retried.
	require.NoError(t, retryUnavailable(func() error {
		_, err := other.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
		return err
	}))

	r := receive(t, res, 10*time.Second, "the waiter's grant after the pub/sub connection was killed")
	require.NoError(t, r.err)
	assert.Greater(t, r.grant.Fence, holder.Fence)
	st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), r.grant.Token)
	require.NoError(t, err)
	require.NotNil(t, st.Yours)
	assert.True(t, *st.Yours, "Redis has the waiter as holder: %+v", st)
	_, err = w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
	assert.NoError(t, err)
}

// TestWaitEndingAsItIsGrantedStrandsNothing races a waiter's cancellation against the release that
// hands the lock to it. Whichever wins, afterwards the lock must be free with nobody queued: a grant
// that reached a waiter who left is passed on, and a waiter that returns a grant really holds it.
func TestWaitEndingAsItIsGrantedStrandsNothing(t *testing.T) {
	t.Parallel()
	// A long claim makes a grant stranded on a waiter that left visible for longer than the
	// settling deadline below, instead of healing on its own after the default 750 ms.
	w := newWaitWorld(t, lockcore.Options{ClaimTTL: 10 * time.Second})
	ctx := context.Background()
	const lock = "edge"
	outcomes := map[string]int{} // how each iteration's Acquire ended, and how many stranded the lock
	defer func() { t.Logf("outcomes of the race: %v", outcomes) }()
	for i := range 50 {
		holder := w.hold(t, w.svc, lock, "holder", time.Minute)
		waitCtx, cancel := context.WithCancel(ctx)
		res := acquireAsync(waitCtx, w.svc,
			lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
		w.awaitWaiters(t, lock, 1)

		start := make(chan struct{})
		released := make(chan error, 1)
		// Delaying the cancellation by 0-900 µs, varying with the iteration, spreads the races over
		// the whole hand-off (before the release, while the grant is in flight, while the waiter
		// confirms it). The sleep shifts the interleaving; it synchronises nothing.
		jitter := time.Duration(i%10) * 100 * time.Microsecond
		go func() {
			<-start
			time.Sleep(jitter)
			cancel()
		}()
		go func() {
			<-start
			_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
			released <- err
		}()
		close(start)
		r := receive(t, res, 10*time.Second, fmt.Sprintf("iteration %d: the waiter's Acquire", i))
		relErr := receive(t, released, 10*time.Second, fmt.Sprintf("iteration %d: the holder's Release", i))
		require.NoError(t, relErr, "iteration %d: the holder's release", i)

		switch {
		case r.err == nil:
			outcomes["granted"]++
			rel, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
			assert.NoError(t, err, "iteration %d: a waiter that returned a grant holds the lock", i)
			assert.True(t, rel.Released, "iteration %d", i)
		case errors.Is(r.err, context.Canceled):
			outcomes["cancelled"]++
		default:
			outcomes["error: "+r.err.Error()]++
			assert.Fail(t, "a cancelled wait returns a grant or context.Canceled",
				"iteration %d: %v", i, r.err)
		}

		if !w.settles(t, lock) {
			outcomes["lock stranded"]++
		}
	}
}

// settles polls until lock is free with nobody queued, for up to 2 s (shorter than a 10 s claim: a
// grant stranded on a waiter that left shows), and reports whether it got there; if not, it fails
// t and clears the lock by hand, so that the iterations after it still run.
func (w *waitWorld) settles(t *testing.T, lock string) bool {
	t.Helper()
	var st lockcore.State
	settled := func() bool {
		var err error
		st, err = w.svc.Inspect(context.Background(), lockcore.LockRef(lock), "")
		return err == nil && !st.Held() && st.Waiters == 0
	}
	deadline := time.Now().Add(2 * time.Second)
	for !settled() && time.Now().Before(deadline) {
		<-time.After(5 * time.Millisecond)
	}
	if settled() {
		return true
	}
	assert.Fail(t, "after the race the lock is free and nobody waits", "lock stranded: %+v", st)
	w.redis.MustDo(t, "DEL", w.key(lock, ""), w.key(lock, ":q"), w.key(lock, ":qd"), w.key(lock, ":qm"))
	return false
}

// TestWaitRunningOutAsItIsGrantedStrandsNothing races the end of a wait (its Wait running out)
// against the release that hands the lock to it: the waiter gets the lock (and then holds it), or a
// 409 with the lock passed on; never both, never neither.
func TestWaitRunningOutAsItIsGrantedStrandsNothing(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{ClaimTTL: 10 * time.Second})
	ctx := context.Background()
	const lock, wait = "running-out", 300 * time.Millisecond
	outcomes := map[string]int{}
	defer func() { t.Logf("outcomes of the race: %v", outcomes) }()
	for i := range 40 {
		holder := w.hold(t, w.svc, lock, "holder", time.Minute)
		start := time.Now()
		res := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: wait})
		// Seen queued, or already run out: on a loaded machine the test may look only after the
		// 300 ms wait is over, and that iteration then races nothing.
		var early *acquired
		pollUntil(t, 10*time.Second, "the waiter queued, or its wait over", func() bool {
			select {
			case r := <-res:
				early = &r
				return true
			default:
			}
			st, err := w.svc.Inspect(ctx, lockcore.LockRef(lock), "")
			return err == nil && st.Waiters == 1
		})
		if early != nil {
			var held *lockcore.HeldError
			require.ErrorAs(t, early.err, &held, "iteration %d: a wait that ran out before the release", i)
			outcomes["ran out before the release"]++
			_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
			require.NoError(t, err)
			w.settles(t, lock)
			continue
		}
		// Releasing from 5 ms before the wait runs out to 1 ms after it (a hand-off takes about a
		// millisecond), varying with the iteration, spreads the race over the wait's end. The
		// timing shifts the interleaving; it synchronises nothing.
		<-time.After(time.Until(start.Add(wait - 5*time.Millisecond + time.Duration(i%20)*300*time.Microsecond)))
		_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
		require.NoError(t, err, "iteration %d: the holder's release", i)
		r := receive(t, res, 10*time.Second, fmt.Sprintf("iteration %d: the waiter's Acquire", i))

		var held *lockcore.HeldError
		switch {
		case r.err == nil:
			outcomes["granted"]++
			rel, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
			assert.NoError(t, err, "iteration %d: a waiter that returned a grant holds the lock", i)
			assert.True(t, rel.Released, "iteration %d", i)
		case errors.As(r.err, &held):
			outcomes["ran out"]++
		default:
			outcomes["error: "+r.err.Error()]++
			assert.Fail(t, "a wait that runs out returns a grant or a *HeldError", "iteration %d: %v", i, r.err)
		}
		if !w.settles(t, lock) {
			outcomes["lock stranded"]++
		}
	}
}

// TestCloseAsAWaiterIsGrantedStrandsNothing races a Service's Close, which ends its waits, against
// the release (on another replica) that hands the lock to its waiter: the waiter gets the lock (and
// holds it), or a *ShutdownError with the lock passed on.
func TestCloseAsAWaiterIsGrantedStrandsNothing(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{ClaimTTL: 10 * time.Second})
	ctx := context.Background()
	const lock = "closing-race"
	outcomes := map[string]int{}
	defer func() { t.Logf("outcomes of the race: %v", outcomes) }()
	for i := range 20 {
		closing := w.replica(t, lockcore.Options{ClaimTTL: 10 * time.Second})
		holder := w.hold(t, w.svc, lock, "holder", time.Minute)
		res := acquireAsync(ctx, closing, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
		w.awaitWaiters(t, lock, 1)

		start := make(chan struct{})
		released := make(chan error, 1)
		jitter := time.Duration(i%10) * 100 * time.Microsecond // shifts the interleaving; synchronises nothing
		go func() {
			<-start
			time.Sleep(jitter)
			closing.Close()
		}()
		go func() {
			<-start
			_, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
			released <- err
		}()
		close(start)
		r := receive(t, res, 10*time.Second, fmt.Sprintf("iteration %d: the waiter's Acquire", i))
		require.NoError(t, receive(t, released, 10*time.Second, "the holder's Release"), "iteration %d", i)

		var shutdown *lockcore.ShutdownError
		switch {
		case r.err == nil:
			outcomes["granted"]++
			rel, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
			assert.NoError(t, err, "iteration %d: a waiter that returned a grant holds the lock", i)
			assert.True(t, rel.Released, "iteration %d", i)
		case errors.As(r.err, &shutdown):
			outcomes["closed"]++
		default:
			outcomes["error: "+r.err.Error()]++
			assert.Fail(t, "a wait its Service's Close ends returns a grant or a *ShutdownError", "iteration %d: %v", i, r.err)
		}
		if !w.settles(t, lock) {
			outcomes["lock stranded"]++
		}
	}
}
