package interop

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/redisson"
	"github.com/leasegate/leasegate/internal/testkit"
)

// tryOnce reports whether l's tryLock without waiting takes it (failing t on an error).
func tryOnce(t *testing.T, l *redisson.Lock, lease time.Duration) bool {
	t.Helper()
	ok, err := l.TryLock(t.Context(), 0, lease)
	require.NoError(t, err)
	return ok
}

// TestReadersShareAcrossBothSides: gateway shared holders and Redisson readers hold rw.report
// together; either side's writer is kept out while either side reads; the last reader's release
// (on either side) lets a waiting writer of the other side in, woken by a message.
func TestReadersShareAcrossBothSides(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	rw := w.jvm(t, redisson.Options{}).ReadWriteLock("rw.report")
	reader, writer := rw.ReadLock(1), rw.WriteLock(2)

	s := w.acquire("rw.report", testkit.SharedBody("web", 20_000, 0))
	require.Equal(t, http.StatusCreated, s.Status, string(s.Body))
	assert.True(t, tryOnce(t, reader, -1), "a Redisson reader beside a gateway reader")
	assert.False(t, tryOnce(t, writer, -1), "a Redisson writer while both read")
	x := w.acquire("rw.report", testkit.AcquireBody("web-writer", 5000))
	require.Equal(t, http.StatusConflict, x.Status, string(x.Body))

	st := w.state(t, "rw.report")
	assert.Equal(t, "shared", st["mode"])
	require.Len(t, st["redisson_holders"], 1)

	// Redisson's reader leaves first: the gateway's read hold keeps Redisson's writer out.
	require.NoError(t, reader.Unlock(ctx))
	assert.False(t, tryOnce(t, writer, -1), "a Redisson writer while the gateway reads")

	// A Redisson writer waits; the gateway's reader leaves; the writer gets in at once.
	type result struct {
		ok bool
		at time.Time
	}
	done := make(chan result, 1)
	go func() {
		ok, err := writer.TryLock(ctx, 15*time.Second, 10*time.Second)
		assert.NoError(t, err)
		done <- result{ok, time.Now()}
	}()
	awaitRedissonSubscriber(t, w, "redisson_rwlock:{rw.report}")
	released := time.Now()
	w.release(t, "rw.report", s)
	res := testkit.Receive(t, done, 15*time.Second, "the Redisson writer")
	require.True(t, res.ok)
	within(t, res.at.Sub(released), time.Second, "the Redisson writer's grant after the gateway reader's release")

	// Redisson writes: the gateway's readers and writers wait, and are woken by its unlock.
	waiting := testkit.StartWaiter(w.Client, ctx, "rw.report", "web", 5000, 15_000)
	r := w.acquire("rw.report", testkit.SharedBody("web-reader", 5000, 0))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	testkit.EventuallyPaced(t, 10*time.Second, "the gateway waiter in line", func() bool { return w.Waiters(t, "rw.report") == 1 })
	unlocked := time.Now()
	require.NoError(t, writer.Unlock(ctx))
	g := testkit.Receive(t, waiting, 15*time.Second, "the gateway waiter")
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	within(t, time.Since(unlocked), time.Second, "the gateway writer's grant after Redisson's write unlock")

	// The gateway writes: Redisson's readers wait, and get in once it releases (a '1': all wake).
	assert.False(t, tryOnce(t, reader, -1), "a Redisson reader while the gateway writes")
	readDone := make(chan result, 1)
	go func() {
		ok, err := reader.TryLock(ctx, 15*time.Second, 10*time.Second)
		assert.NoError(t, err)
		readDone <- result{ok, time.Now()}
	}()
	awaitRedissonSubscriber(t, w, "redisson_rwlock:{rw.report}")
	released = time.Now()
	w.release(t, "rw.report", g)
	res = testkit.Receive(t, readDone, 15*time.Second, "the Redisson reader")
	require.True(t, res.ok)
	within(t, res.at.Sub(released), time.Second, "the Redisson reader's grant after the gateway writer's release")
	require.NoError(t, reader.Unlock(ctx))
}

// TestDowngradeAcrossBothSides: a gateway writer that takes a shared hold and gives back its
// exclusive one (a downgrade) leaves Redisson's readers in and its writers out, as Redisson's own
// downgrade does.
func TestDowngradeAcrossBothSides(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	rw := w.jvm(t, redisson.Options{}).ReadWriteLock("rw.acct")
	reader, writer := rw.ReadLock(1), rw.WriteLock(2)

	x := w.acquire("rw.acct", testkit.AcquireBody("owner", 20_000))
	require.Equal(t, http.StatusCreated, x.Status, string(x.Body))
	s := w.Client.Do(http.MethodPost, "/locks/rw.acct", testkit.TokenHeader(x.Str("token")), testkit.SharedBody("owner", 20_000, 0))
	require.Equal(t, http.StatusOK, s.Status, string(s.Body))
	assert.False(t, tryOnce(t, reader, -1), "a Redisson reader while the gateway writes (and reads)")

	rel := w.Client.Do(http.MethodDelete, "/locks/rw.acct", testkit.TokenHeader(x.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
	require.Equal(t, "exclusive", rel.Str("mode"))
	assert.True(t, tryOnce(t, reader, -1), "a Redisson reader beside the downgraded gateway lease")
	assert.False(t, tryOnce(t, writer, -1), "a Redisson writer while both read")
	require.NoError(t, reader.Unlock(ctx))
	assert.False(t, tryOnce(t, writer, -1), "a Redisson writer while the gateway still reads")
	w.release(t, "rw.acct", x)
	assert.True(t, tryOnce(t, writer, -1), "free once the gateway's read hold is given back")
	require.NoError(t, writer.Unlock(ctx))
}

// TestRedissonReaderWatchdogDoesNotCutAGatewayReadShort: a Redisson reader's watchdog sets the
// read-write lock's TTL to its watchdog timeout whoever else reads, so the gateway takes TTLs of at
// most that timeout on read-write names (LEASEGATE_REDISSON_WATCHDOG_TIMEOUT) and renews
// Redisson's object with its own holds: a gateway reader keeps Redisson's writers out after a
// Redisson reader's instance died mid-read.
func TestRedissonReaderWatchdogDoesNotCutAGatewayReadShort(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := harness.NewGateway(t, w.GatewayOptions(w.Gateway.KeyPrefix, map[string]string{
		"LEASEGATE_REDISSON_LOCKS": lockPrefix, "LEASEGATE_REDISSON_RWLOCKS": rwlockPrefix,
		"LEASEGATE_REDISSON_WATCHDOG_TIMEOUT": "1500ms"}))
	c := harness.NewClient(t, gw.URL)
	a := w.jvm(t, redisson.Options{WatchdogTimeout: 1500 * time.Millisecond})
	reader := a.ReadWriteLock("rw.cut").ReadLock(1)
	writer := w.jvm(t, redisson.Options{}).ReadWriteLock("rw.cut").WriteLock(1)

	r := c.Do(http.MethodPost, "/locks/rw.cut", nil, testkit.SharedBody("web", 3000, 0))
	require.Equal(t, http.StatusBadRequest, r.Status, "a TTL above the Redisson watchdog timeout: %s", r.Body)
	s := c.Do(http.MethodPost, "/locks/rw.cut", nil, `{"owner":"web","ttl_ms":1500,"mode":"shared","watchdog":true}`)
	require.Equal(t, http.StatusCreated, s.Status, string(s.Body))
	require.True(t, tryOnce(t, reader, -1))
	// Let Redisson's watchdog renew (every 500 ms, to 1.5 s), then stop its instance without
	// unlocking (a JVM that died): its last renewal left the hash 1.5 s, its read hold's key too.
	deadline := time.Now().Add(1200 * time.Millisecond)
	testkit.EventuallyPaced(t, 3*time.Second, "a few Redisson renewals", func() bool { return time.Now().After(deadline) })
	a.Close()
	testkit.Throughout(t, 4*time.Second, "Redisson's writer kept out while the gateway reads", func() bool {
		return !tryOnce(t, writer, 20*time.Second)
	})
	rel := c.Do(http.MethodDelete, "/locks/rw.cut", testkit.TokenHeader(s.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
	testkit.EventuallyPaced(t, 5*time.Second, "Redisson's writer in once the gateway's reader left", func() bool {
		return tryOnce(t, writer, 20*time.Second)
	})
}

// awaitRedissonSubscriber waits until channel has a (classic) subscriber on the standalone or
// Sentinel master; on a Cluster, Redisson's sharded subscription is not counted there, and its
// tryLock tries once more after subscribing anyway.
func awaitRedissonSubscriber(t *testing.T, w *world, channel string) {
	t.Helper()
	if w.sharded {
		return
	}
	testkit.EventuallyPaced(t, 10*time.Second, "Redisson's subscription to "+channel, func() bool {
		n, err := w.Redis.DoList("PUBSUB", "NUMSUB", channel)
		return err == nil && len(n) == 2 && n[1] != "0"
	})
}

// TestAnRLockOnAReadWriteNameKeepsTheGatewayOut: a Redisson client that takes a read-write name
// with getLock (not getReadWriteLock) holds a hash without a mode; the gateway's readers and
// writers take it for an exclusive holder, and its scripts (a waiter's too, which end by mirroring
// the gateway's holds) leave it alone.
func TestAnRLockOnAReadWriteNameKeepsTheGatewayOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	l := w.jvm(t, redisson.Options{}).Lock("rw.misused", 1)
	require.True(t, tryOnce(t, l, -1))
	for _, body := range []string{testkit.SharedBody("web", 5000, 0), testkit.AcquireBody("web", 5000)} {
		r := w.acquire("rw.misused", body)
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	}
	waiting := testkit.StartWaiter(w.Client, t.Context(), "rw.misused", "web", 5000, 1000)
	r := testkit.Receive(t, waiting, 10*time.Second, "the waiter")
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	held, err := l.IsHeldByCurrentThread(t.Context())
	require.NoError(t, err)
	assert.True(t, held, "Redisson's hold is left alone")
	require.NoError(t, l.Unlock(t.Context()))
}
