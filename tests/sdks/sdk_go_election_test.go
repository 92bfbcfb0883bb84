package sdks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	leasegate "github.com/leasegate/leasegate/sdk/go"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// nextEvent returns the next event of events within timeout.
func nextEvent(t *testing.T, events <-chan leasegate.ElectionEvent, timeout time.Duration) leasegate.ElectionEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		require.True(t, ok, "the events channel closed")
		return ev
	case <-time.After(timeout):
		require.FailNow(t, "no event", "within %v", timeout)
		return leasegate.ElectionEvent{}
	}
}

// TestGoSDKCampaignResignHandsOverInLine: a try-once campaign while someone leads gets ErrLed;
// waiting candidates are elected in the order they came, each on its predecessor's Resign; an
// observer sees every lead, its proclaims and its end in that order, with increasing fences.
func TestGoSDKCampaignResignHandsOverInLine(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	events := sdk.Observe(ctx, "sched", "")
	first := nextEvent(t, events, 5*time.Second)
	require.Equal(t, "state", first.Type)
	require.NotNil(t, first.State)
	assert.False(t, first.State.Led)

	a, err := sdk.Campaign(ctx, "sched", "a:1", leasegate.CampaignOptions{Owner: "a", TTL: 10 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, "sched", a.Lock)
	assert.Equal(t, "a:1", a.Value())
	a.KeepAlive()

	_, err = sdk.Campaign(ctx, "sched", "x", leasegate.CampaignOptions{Owner: "x"})
	assert.ErrorIs(t, err, leasegate.ErrLed)

	// b then c wait in line; c starts only once b is counted as a candidate.
	type won struct {
		lead *leasegate.Lead
		err  error
	}
	bWon, cWon := make(chan won, 1), make(chan won, 1)
	campaign := func(owner string, out chan<- won) {
		l, err := sdk.Campaign(ctx, "sched", owner+":1", leasegate.CampaignOptions{Owner: owner, TTL: 10 * time.Second, Wait: 20 * time.Second})
		out <- won{l, err}
	}
	candidates := func(n int64) func() bool {
		return func() bool {
			st, err := sdk.InspectElection(ctx, "sched")
			return err == nil && st.Candidates == n
		}
	}
	go campaign("b", bWon)
	harness.Eventually(t, 5*time.Second, "b in line", candidates(1))
	go campaign("c", cWon)
	harness.Eventually(t, 5*time.Second, "c in line", candidates(2))

	require.NoError(t, a.Proclaim(ctx, "a:2"))
	assert.Equal(t, "a:2", a.Value())
	require.NoError(t, a.Resign(ctx))
	<-a.Done()
	assert.ErrorIs(t, a.Err(), leasegate.ErrReleased)

	var b won
	select {
	case b = <-bWon:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "b was not elected")
	}
	require.NoError(t, b.err)
	assert.Greater(t, b.lead.Fence, a.Fence)
	select {
	case c := <-cWon:
		require.FailNow(t, "c elected before b resigned", "%+v", c)
	default:
	}
	require.NoError(t, b.lead.Resign(ctx))
	c := <-cWon
	require.NoError(t, c.err)
	assert.Greater(t, c.lead.Fence, b.lead.Fence)
	require.NoError(t, c.lead.Resign(ctx))

	want := []struct {
		typ, owner, value string
		fence             int64
	}{
		{"elected", "a", "a:1", a.Fence}, {"proclaimed", "a", "a:2", a.Fence}, {"resigned", "a", "", a.Fence},
		{"elected", "b", "b:1", b.lead.Fence}, {"resigned", "b", "", b.lead.Fence},
		{"elected", "c", "c:1", c.lead.Fence}, {"resigned", "c", "", c.lead.Fence},
	}
	for i, w := range want {
		ev := nextEvent(t, events, 5*time.Second)
		assert.Equal(t, w.typ, ev.Type, "event %d", i)
		assert.Equal(t, w.owner, ev.Owner, "event %d", i)
		assert.Equal(t, w.value, ev.Value, "event %d", i)
		assert.Equal(t, w.fence, ev.Fence, "event %d", i)
		assert.NotEmpty(t, ev.ID)
	}
}

// TestGoSDKLeadLostWithin100msOfForce: a kept-alive lead follows the election's events, and a
// force release closes Done within 100 ms of its answer (the renewal would come 10 s later), saying
// that the lead was force-released.
func TestGoSDKLeadLostWithin100msOfForce(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	lead, err := sdk.Campaign(ctx, "forced", "v", leasegate.CampaignOptions{Owner: "leader", TTL: 30 * time.Second})
	require.NoError(t, err)
	assert.False(t, lead.Watching(), "not watched before KeepAlive (WatchKept)")
	lead.KeepAlive()
	harness.Eventually(t, 10*time.Second, "the events stream to open", lead.Watching)

	answered := forceRelease(t, e, "/elections/forced")
	took := waitDone(t, lead.Done(), answered, 5*time.Second, "force release")
	t.Logf("Done closed %v after the force release's answer", took)
	assert.Less(t, took, lostWithin, "Done within 100 ms of the force release's answer")

	err = lead.Err()
	assert.ErrorIs(t, err, leasegate.ErrLeaseGone)
	var lost *leasegate.LostError
	require.ErrorAs(t, err, &lost)
	assert.Equal(t, "forced", lost.Lock)
	assert.Equal(t, lead.Fence, lost.Fence)
	assert.True(t, lost.Election)
	assert.Equal(t, `lead of election "forced" lost: force-released`, err.Error(), "not \"the gateway no longer has it\"")
	assert.ErrorIs(t, err, leasegate.ErrLeaseForced)
	assert.Equal(t, leasegate.EndForced, lead.EndReason())
	assert.False(t, lead.Watching())
	assert.ErrorIs(t, lead.Proclaim(ctx, "w"), leasegate.ErrLeaseGone)
	assert.ErrorIs(t, lead.Resign(ctx), leasegate.ErrLeaseGone)
}

// TestGoSDKWatchdogLeadIsWatchedAndLapses: a watchdog lead is watched from its election; an
// unrenewed lead's Done closes a safety margin before it can lapse (ErrLeaseLapsing).
func TestGoSDKWatchdogLeadIsWatchedAndLapses(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	wd, err := sdk.Campaign(ctx, "wd", "v", leasegate.CampaignOptions{Owner: "w", TTL: 2 * time.Second, Watchdog: true})
	require.NoError(t, err)
	harness.Eventually(t, 10*time.Second, "the watchdog lead's stream to open", wd.Watching)
	require.NoError(t, wd.Resign(ctx))

	lead, err := sdk.Campaign(ctx, "lapse", "v", leasegate.CampaignOptions{Owner: "l", TTL: 500 * time.Millisecond})
	require.NoError(t, err)
	select {
	case <-lead.Done():
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Done not closed before the lapse")
	}
	assert.ErrorIs(t, lead.Err(), leasegate.ErrLeaseLapsing)
	assert.False(t, time.Now().After(lead.ValidUntil()), "Done closed before ValidUntil")
}

// TestGoSDKObserverResumesAcrossGatewayKill: an observer whose gateway is killed goes on through
// another replica after the last event it received, missing nothing and repeating nothing.
func TestGoSDKObserverResumesAcrossGatewayKill(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sdk1, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)
	sdk2, err := leasegate.New(gw2.URL)
	require.NoError(t, err)

	events := sdk1.Observe(ctx, "resume", "", sdk2)
	require.Equal(t, "state", nextEvent(t, events, 5*time.Second).Type)
	lead, err := sdk2.Campaign(ctx, "resume", "v1", leasegate.CampaignOptions{Owner: "l", TTL: 30 * time.Second})
	require.NoError(t, err)
	elected := nextEvent(t, events, 5*time.Second)
	require.Equal(t, "elected", elected.Type)

	require.NoError(t, e.Gateway.Kill())
	// Written while the observer's gateway is down.
	require.NoError(t, lead.Proclaim(ctx, "v2"))
	require.NoError(t, lead.Proclaim(ctx, "v3"))
	require.NoError(t, lead.Resign(ctx))

	var got []string
	for range 3 {
		ev := nextEvent(t, events, 10*time.Second)
		got = append(got, ev.Type+" "+ev.Value)
		assert.False(t, ev.Gap)
	}
	assert.Equal(t, []string{"proclaimed v2", "proclaimed v3", "resigned "}, got)

	// Resuming after an id the log no longer holds says so with a gap state.
	stale := sdk2.Observe(ctx, "resume", "1-0")
	ev := nextEvent(t, stale, 5*time.Second)
	assert.Equal(t, "state", ev.Type)
	assert.True(t, ev.Gap, "a state with gap for events the log no longer holds")
}

// TestGoSDKCampaignWaitRunsOut: a waiting campaign whose wait runs out returns ErrLed.
func TestGoSDKCampaignWaitRunsOut(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	ctx := context.Background()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)
	lead, err := sdk.Campaign(ctx, "busy", "v", leasegate.CampaignOptions{Owner: "a", TTL: 10 * time.Second})
	require.NoError(t, err)
	defer func() { _ = lead.Resign(ctx) }()
	_, err = sdk.Campaign(ctx, "busy", "w", leasegate.CampaignOptions{Owner: "b", Wait: 300 * time.Millisecond})
	var p *leasegate.ProblemError
	require.True(t, errors.As(err, &p), "%v", err)
	assert.EqualValues(t, http.StatusConflict, p.Status)
	assert.ErrorIs(t, err, leasegate.ErrLed)
}

// TestGoSDKObserverGoesOnAfterAClosedStream: a stream the gateway ends (its maximum lifetime:
// a closed event, without id) is reopened after the last event received, so the observer sees
// nothing twice and misses nothing, and a lead watched through it stays watched.
func TestGoSDKObserverGoesOnAfterAClosedStream(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_MAX_STREAM_LIFETIME": "1s"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sdk, err := leasegate.New(e.Gateway.URL)
	require.NoError(t, err)

	events := sdk.Observe(ctx, "closing", "")
	require.Equal(t, "state", nextEvent(t, events, 5*time.Second).Type)
	lead, err := sdk.Campaign(ctx, "closing", "v1", leasegate.CampaignOptions{Owner: "l", TTL: 30 * time.Second, WatchLoss: leasegate.WatchAlways})
	require.NoError(t, err)
	require.Equal(t, "elected", nextEvent(t, events, 5*time.Second).Type)

	// Past two of the streams' lifetimes, each proclaim is seen once, in order.
	for i := 2; i <= 4; i++ {
		<-time.After(700 * time.Millisecond) // not a synchronisation: the streams' lifetime must pass
		v := fmt.Sprint("v", i)
		require.NoError(t, lead.Proclaim(ctx, v))
		ev := nextEvent(t, events, 5*time.Second)
		assert.Equal(t, "proclaimed", ev.Type)
		assert.Equal(t, v, ev.Value)
	}
	select {
	case <-lead.Done():
		require.FailNow(t, "the lead ended", "%v", lead.Err())
	default:
	}
	harness.Eventually(t, 5*time.Second, "the lead's stream open again", lead.Watching)
	require.NoError(t, lead.Resign(ctx))
	assert.Equal(t, "resigned", nextEvent(t, events, 5*time.Second).Type)
}
