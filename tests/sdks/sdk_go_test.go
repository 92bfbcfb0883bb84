package sdks

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
	leasegate "github.com/leasegate/leasegate/sdk/go"
)

func TestGoSDKEndToEnd(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	a, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	// acquire
	lease, err := a.Lock(ctx, "sdk", leasegate.LockOptions{Owner: "a", TTL: 30 * time.Second})
	require.NoError(t, err)
	assert.Positive(t, lease.Fence)
	assert.Equal(t, int64(1), lease.Holds())

	// 409 contention
	_, err = a.Lock(ctx, "sdk", leasegate.LockOptions{Owner: "b"})
	require.ErrorIs(t, err, leasegate.ErrHeld)
	var p *leasegate.ProblemError
	require.ErrorAs(t, err, &p)
	assert.Greater(t, p.RetryAfter(), 20*time.Second)

	// long-poll wait: b waits in line, a releases, b gets it
	got := make(chan *leasegate.Lease, 1)
	waitErr := make(chan error, 1)
	go func() {
		l, err := a.Lock(ctx, "sdk", leasegate.LockOptions{Owner: "b", TTL: 10 * time.Second, Wait: 20 * time.Second})
		got <- l
		waitErr <- err
	}()
	harness.Eventually(t, 5*time.Second, "b queued", func() bool {
		st, err := a.Inspect(ctx, "sdk", "")
		return err == nil && st.Waiters == 1
	})
	released, err := lease.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	b := <-got
	require.NoError(t, <-waitErr)
	assert.Equal(t, "b", b.Owner)
	assert.Greater(t, b.Fence, lease.Fence)

	// renew
	before := time.Time(b.Grant().ExpiresAt)
	require.NoError(t, b.Renew(ctx, 60*time.Second))
	assert.True(t, time.Time(b.Grant().ExpiresAt).After(before))
	assert.Equal(t, int64(60000), b.Grant().TtlMs)

	// re-entry
	require.NoError(t, b.Reenter(ctx, 60*time.Second))
	assert.Equal(t, int64(2), b.Holds())
	released, err = b.Release(ctx)
	require.NoError(t, err)
	assert.False(t, released)
	released, err = b.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)

	// 410 after loss
	_, err = b.Release(ctx)
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone)
	assert.ErrorIs(t, b.Renew(ctx, 0), leasegate.ErrLeaseGone)

	// watchdog: a 1 s lease kept alive well past its TTL
	start := time.Now()
	w, err := a.Lock(ctx, "sdk-wd", leasegate.LockOptions{Owner: "w", TTL: time.Second, Watchdog: true, MaxHold: time.Minute})
	require.NoError(t, err)
	assert.True(t, w.Watchdog)
	for time.Since(start) < 2500*time.Millisecond {
		st, err := a.Inspect(ctx, "sdk-wd", w.Token)
		require.NoError(t, err)
		require.True(t, st.Held)
		require.True(t, *st.Yours)
		<-time.After(100 * time.Millisecond)
	}
	_, err = w.Release(ctx)
	require.NoError(t, err)
}

func TestGoSDKIsGenerated(t *testing.T) {
	t.Parallel()
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	dir := filepath.Join(root, "sdk", "go")
	// The committed configuration, writing elsewhere.
	tmp := t.TempDir()
	out := filepath.Join(tmp, "client.gen.go")
	config, err := os.ReadFile(filepath.Join(dir, "oapi-codegen.yaml"))
	require.NoError(t, err)
	config = bytes.Replace(config, []byte("output: sdk/go/client.gen.go"), []byte("output: "+out), 1)
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "config.yaml"), config, 0o644))
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", filepath.Join(tmp, "config.yaml"), "openapi.yaml")
	cmd.Dir = root
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	fresh, err := os.ReadFile(out)
	require.NoError(t, err)
	committed, err := os.ReadFile(filepath.Join(dir, "client.gen.go"))
	require.NoError(t, err)
	if !bytes.Equal(fresh, committed) {
		t.Fatal(errors.New("sdk/go/client.gen.go is stale: run (cd sdk/go && go generate)"))
	}
}

// TestGoSDKSplitWaitKeepsItsPlace has the SDK split a wait into 200 ms long-polls while 20
// newcomers queue behind it on another replica: with the queue tickets it passes from one poll to
// the next, it is still first in line when the lock is released.
func TestGoSDKSplitWaitKeepsItsPlace(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_ACCESS_LOG": "all"}) // counts the 409 polls in the access log
	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)
	other, err := leasegate.New(gw2.URL)
	require.NoError(t, err)
	holder, err := sdk.Lock(ctx, "patient", leasegate.LockOptions{Owner: "holder", TTL: time.Minute})
	require.NoError(t, err)

	type result struct {
		lease *leasegate.Lease
		err   error
	}
	patient := make(chan result, 1)
	go func() {
		l, err := sdk.Lock(ctx, "patient", leasegate.LockOptions{Owner: "patient", TTL: time.Minute,
			Wait: time.Minute, MaxWaitPerRequest: 200 * time.Millisecond})
		patient <- result{l, err}
	}()
	waiters := func() int64 {
		st, err := sdk.Inspect(ctx, "patient", "")
		if err != nil {
			return -1
		}
		return st.Waiters
	}
	harness.Eventually(t, 10*time.Second, "the patient waiter in line", func() bool { return waiters() == 1 })
	const newcomers = 20
	late := make(chan result, newcomers)
	for range newcomers {
		go func() {
			l, err := other.Lock(ctx, "patient", leasegate.LockOptions{Owner: "newcomer", TTL: time.Minute, Wait: time.Minute})
			late <- result{l, err}
		}()
	}
	harness.Eventually(t, 10*time.Second, "the newcomers in line", func() bool { return waiters() >= newcomers })
	// The patient waiter's polls run out every 200 ms (its gateway logs each 409); once three have
	// since the newcomers queued, and it is back in line, release.
	polls := func() int { return strings.Count(e.Gateway.Logs(), `"path":"/locks/patient","status":409`) }
	since := polls()
	harness.Eventually(t, 10*time.Second, "three more polls to run out", func() bool { return polls() >= since+3 })
	harness.Eventually(t, 5*time.Second, "the patient waiter back in line", func() bool { return waiters() == newcomers+1 })
	_, err = holder.Release(ctx)
	require.NoError(t, err)
	r := <-patient
	require.NoError(t, r.err)
	assert.Equal(t, "patient", r.lease.Owner, "the split wait kept its place ahead of the newcomers")
	_, err = r.lease.Release(ctx)
	require.NoError(t, err)
	for range newcomers {
		n := <-late
		require.NoError(t, n.err)
		_, err := n.lease.Release(ctx)
		require.NoError(t, err)
	}
}

// TestGoSDKKeepAliveAndDone checks the SDK's before-expiry rule: a kept-alive lease stays held
// while work reads it concurrently (the race detector watches), Done closes with ErrLeaseGone once
// a renewal finds the lease gone, and a lease nobody renews closes Done before it can lapse.
func TestGoSDKKeepAliveAndDone(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	kept, err := sdk.Lock(ctx, "kept", leasegate.LockOptions{Owner: "k", TTL: 900 * time.Millisecond})
	require.NoError(t, err)
	kept.KeepAlive()
	readers := make(chan struct{})
	go func() { // work reading the lease while it is renewed
		defer close(readers)
		for kept.Err() == nil {
			_ = kept.Fence + kept.Grant().TtlMs + kept.Holds()
			_ = kept.ValidUntil()
			<-time.After(time.Millisecond)
		}
	}()
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; <-time.After(100 * time.Millisecond) {
		st, err := sdk.Inspect(ctx, "kept", kept.Token)
		require.NoError(t, err)
		require.True(t, *st.Yours, "kept alive")
		require.NoError(t, kept.Err())
	}
	// Someone releases it behind its back: the next renewal finds it gone.
	r := e.Client.Do("DELETE", "/locks/kept", testkit.TokenHeader(kept.Token), "")
	require.Equal(t, 200, r.Status)
	select {
	case <-kept.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close after the lease was lost")
	}
	assert.ErrorIs(t, kept.Err(), leasegate.ErrLeaseGone)
	assert.ErrorIs(t, context.Cause(kept.Context()), leasegate.ErrLeaseGone)
	<-readers

	// Nobody renews this one: Done closes a margin before it can lapse, while Redis still has it.
	idle, err := sdk.Lock(ctx, "idle", leasegate.LockOptions{Owner: "i", TTL: 2 * time.Second})
	require.NoError(t, err)
	<-idle.Done()
	assert.ErrorIs(t, idle.Err(), leasegate.ErrLeaseLapsing)
	assert.True(t, time.Now().Before(idle.ValidUntil()), "Done closed before the lease can lapse")
	st, err := sdk.Inspect(ctx, "idle", idle.Token)
	require.NoError(t, err)
	assert.True(t, *st.Yours, "the lease was still held when Done closed")

	// Errors show the problem's detail and every rejected input.
	_, err = sdk.Lock(ctx, "bad", leasegate.LockOptions{Owner: "b", TTL: 2 * time.Hour})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ttl_ms: must be between")
}

// TestGoSDKWaitedGrantCountsFromTheGrant waits 1.5 s for a lock with a 1 s TTL: the lease must not
// count as lapsing at once because its wait was longer than its TTL.
func TestGoSDKWaitedGrantCountsFromTheGrant(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)
	e.Hold(t, e.Client, "waited", "holder", 1500) // expires in 1.5 s
	lease, err := sdk.Lock(ctx, "waited", leasegate.LockOptions{Owner: "w", TTL: time.Second, Wait: 10 * time.Second})
	require.NoError(t, err)
	assert.NoError(t, lease.Err(), "not lapsing right after the grant")
	assert.Greater(t, time.Until(lease.ValidUntil()), 500*time.Millisecond)
	_, err = lease.Release(ctx)
	require.NoError(t, err)
}

// TestGoSDKKeepAliveFollowsARenewByHand renews a kept-alive lease by hand to a TTL much shorter
// than the one keep-alive started with: keep-alive must renew it within a third of the new TTL,
// not a third of the old one (by when the lease would have counted as lapsing).
func TestGoSDKKeepAliveFollowsARenewByHand(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	lease, err := sdk.Lock(ctx, "shortened", leasegate.LockOptions{Owner: "s", TTL: 9 * time.Second})
	require.NoError(t, err)
	lease.KeepAlive() // next renewal due in 3 s
	byHand := time.Now()
	require.NoError(t, lease.Renew(ctx, 1500*time.Millisecond))
	// Kept alive past the shortened TTL: a renewal after byHand + 1.5 s pushed ValidUntil beyond
	// byHand + 3 s, and the lease never counted as lapsing (it would at byHand + 1.35 s).
	deadline := time.Now().Add(10 * time.Second)
	for !lease.ValidUntil().After(byHand.Add(3 * time.Second)) {
		require.NoError(t, lease.Err(), "lost before keep-alive renewed the shortened lease")
		require.True(t, time.Now().Before(deadline), "keep-alive did not renew the shortened lease")
		<-time.After(20 * time.Millisecond)
	}
	require.NoError(t, lease.Err())
	st, err := sdk.Inspect(ctx, "shortened", lease.Token)
	require.NoError(t, err)
	assert.True(t, *st.Yours)
	assert.LessOrEqual(t, *st.TtlMs, int64(1500), "keep-alive kept the TTL set by hand")
	_, err = lease.Release(ctx)
	require.NoError(t, err)
}

// TestGoSDKKeepAliveIsNotPutOffByReleases releases two re-entries of a kept-alive 3 s lease, at
// 0.9 s and 1.8 s: a release moves no TTL, so keep-alive's renewals stay due every third of it
// (one that restarted its count at each release would first renew at 2.8 s, after the lease
// counted as lapsing at 2.7 s).
func TestGoSDKKeepAliveIsNotPutOffByReleases(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)
	lease, err := sdk.Lock(ctx, "released-twice", leasegate.LockOptions{Owner: "r", TTL: 3 * time.Second})
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, lease.Reenter(ctx, 3*time.Second))
	}
	start := time.Now()
	lease.KeepAlive()
	for _, at := range []time.Duration{900 * time.Millisecond, 1800 * time.Millisecond} {
		for time.Since(start) < at { // the work, checking the lease as it goes
			require.NoError(t, lease.Err())
			<-time.After(20 * time.Millisecond)
		}
		_, err := lease.Release(ctx)
		require.NoError(t, err)
	}
	for time.Since(start) < 4*time.Second {
		require.NoError(t, lease.Err(), "lost after %v although kept alive (holds %d)", time.Since(start), lease.Holds())
		<-time.After(20 * time.Millisecond)
	}
	assert.Equal(t, int64(1), lease.Holds())
	_, err = lease.Release(ctx)
	require.NoError(t, err)
}

// TestGoSDKRenewalsByHandAndKeepAliveDoNotCross renews by hand, to a shorter TTL, while
// keep-alive's renewal is in flight, its answer held back 300 ms by a proxy (Redis applied it
// before the renewal by hand): answered in the other order, the lease counted as valid for
// keep-alive's 9 s while Redis had 1.5 s, and another owner took the lock while Err was nil. The
// lease must never count as valid while someone else holds the lock.
func TestGoSDKRenewalsByHandAndKeepAliveDoNotCross(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	processed := make(chan struct{}, 100)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, e.Gateway.URL+r.URL.RequestURI(), r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		if strings.HasSuffix(r.URL.Path, "/renew") {
			processed <- struct{}{}
			<-time.After(300 * time.Millisecond) // the answer is slow to come back
		}
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
	defer proxy.Close()
	viaProxy, err := leasegate.New(proxy.URL)
	require.NoError(t, err)
	direct, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	lease, err := viaProxy.Lock(ctx, "crossing", leasegate.LockOptions{Owner: "a", TTL: 9 * time.Second, WatchLoss: leasegate.WatchNever})
	require.NoError(t, err)
	lease.KeepAlive()
	<-processed // keep-alive's first renewal is applied; its answer is on its way
	byHand := time.Now()
	require.NoError(t, lease.RenewVia(ctx, direct, 1500*time.Millisecond))
	for time.Since(byHand) < 3*time.Second {
		other, err := direct.Lock(ctx, "crossing", leasegate.LockOptions{Owner: "b", TTL: 3 * time.Second})
		if err == nil {
			require.Error(t, lease.Err(), "b holds the lock (fence %d) %v after the renewal by hand, while a's lease counts as valid until %v after it",
				other.Fence, time.Since(byHand), lease.ValidUntil().Sub(byHand))
			return
		}
		require.ErrorIs(t, err, leasegate.ErrHeld)
		<-time.After(20 * time.Millisecond)
	}
	_, err = lease.Release(ctx)
	require.NoError(t, err)
}
