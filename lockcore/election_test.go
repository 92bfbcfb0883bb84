package lockcore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// nextElectionEvent reads st's next event within d.
func nextElectionEvent(t *testing.T, st *lockcore.ElectionStream, d time.Duration) lockcore.ElectionEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := st.Next(ctx)
	require.NoError(t, err)
	return ev
}

func observe(t *testing.T, svc *lockcore.Service, name, from string) *lockcore.ElectionStream {
	t.Helper()
	st, err := svc.Observe(context.Background(), name, from)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

func TestElectionCampaignProclaimResignHandOver(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	other := w.replica(t, lockcore.Options{})
	ctx := context.Background()
	st := observe(t, w.svc, "e1", "")
	first := nextElectionEvent(t, st, 5*time.Second)
	require.Equal(t, lockcore.ElectionStateEvent, first.Type)
	assert.Equal(t, "0-0", first.ID)
	assert.Nil(t, first.State.Leader)

	a, err := w.svc.Campaign(ctx, lockcore.CampaignRequest{Election: "e1", Owner: "a", Value: "10.0.0.1:80", TTL: 30 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1:80", a.Value)
	assert.NotEmpty(t, a.EventID)

	_, err = other.Campaign(ctx, lockcore.CampaignRequest{Election: "e1", Owner: "b", Value: "b", TTL: 30 * time.Second})
	var held *lockcore.HeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, lockcore.KindElection, held.Kind)

	ev := nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionElected, ev.Type)
	assert.Equal(t, a.EventID, ev.ID)
	assert.Equal(t, a.Fence, ev.Fence)
	assert.Equal(t, "10.0.0.1:80", ev.Value)

	// A waiting candidate on the other replica.
	type result struct {
		l   lockcore.Leadership
		err error
	}
	bc := make(chan result, 1)
	go func() {
		l, err := other.Campaign(ctx, lockcore.CampaignRequest{Election: "e1", Owner: "b", Value: "b:80", TTL: 30 * time.Second, Wait: 20 * time.Second})
		bc <- result{l, err}
	}()
	pollUntil(t, 10*time.Second, "a candidate waits", func() bool {
		s, err := w.svc.Leader(ctx, "e1")
		return err == nil && s.Candidates == 1
	})

	p, err := w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e1", Token: a.Token, Value: "10.0.0.1:81"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1:81", p.Value)
	ev = nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionProclaimed, ev.Type)
	assert.Equal(t, "10.0.0.1:81", ev.Value)
	assert.Equal(t, a.Fence, ev.Fence)
	same, err := w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e1", Token: a.Token, Value: "10.0.0.1:81"})
	require.NoError(t, err)
	assert.Equal(t, p.EventID, same.EventID, "the same value again announces nothing")
	assert.Equal(t, a.Fence, p.Fence)

	r, err := w.svc.Resign(ctx, lockcore.ResignRequest{Election: "e1", Token: a.Token})
	require.NoError(t, err)
	assert.NotEmpty(t, r.EventID)
	b := <-bc
	require.NoError(t, b.err)
	assert.Greater(t, b.l.Fence, a.Fence)
	assert.Positive(t, b.l.Waited)

	ev = nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionResigned, ev.Type)
	assert.Equal(t, r.EventID, ev.ID)
	assert.Equal(t, a.Fence, ev.Fence)
	ev = nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionElected, ev.Type)
	assert.Equal(t, "b", ev.Owner)
	assert.Equal(t, b.l.Fence, ev.Fence)

	_, err = w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e1", Token: a.Token, Value: "x"})
	require.ErrorIs(t, err, lockcore.ErrLeaseLost)
	_, err = w.svc.Resign(ctx, lockcore.ResignRequest{Election: "e1", Token: a.Token})
	require.ErrorIs(t, err, lockcore.ErrLeaseLost)

	s, err := other.Leader(ctx, "e1")
	require.NoError(t, err)
	require.NotNil(t, s.Leader)
	assert.Equal(t, "b", s.Leader.Owner)
	assert.Equal(t, "b:80", s.Leader.Value)
	assert.Equal(t, ev.ID, s.LastEventID)
}

func TestElectionLapseIsAnnouncedVacant(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	st := observe(t, w.svc, "e2", "")
	require.Equal(t, lockcore.ElectionStateEvent, nextElectionEvent(t, st, 5*time.Second).Type)
	a, err := w.svc.Campaign(ctx, lockcore.CampaignRequest{Election: "e2", Owner: "a", Value: "v", TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, lockcore.ElectionElected, nextElectionEvent(t, st, 5*time.Second).Type)
	ev := nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionVacant, ev.Type)
	assert.Equal(t, a.Fence, ev.Fence)
	assert.WithinDuration(t, a.ExpiresAt, ev.At, 500*time.Millisecond, "announced at its expiry")
	s, err := w.svc.Leader(ctx, "e2")
	require.NoError(t, err)
	assert.Nil(t, s.Leader)
}

func TestElectionResumesAfterAnEventOrRestates(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{ElectionLog: 3})
	ctx := context.Background()
	a, err := w.svc.Campaign(ctx, lockcore.CampaignRequest{Election: "e3", Owner: "a", Value: "v1", TTL: 30 * time.Second})
	require.NoError(t, err)
	p2, err := w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e3", Token: a.Token, Value: "v2"})
	require.NoError(t, err)
	_, err = w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e3", Token: a.Token, Value: "v3"})
	require.NoError(t, err)

	st := observe(t, w.svc, "e3", p2.EventID)
	ev := nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionProclaimed, ev.Type)
	assert.Equal(t, "v3", ev.Value)

	// Two more entries push the elected one and v2's out of a log of 3.
	_, err = w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e3", Token: a.Token, Value: "v4"})
	require.NoError(t, err)
	_, err = w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e3", Token: a.Token, Value: "v5"})
	require.NoError(t, err)
	gone := observe(t, w.svc, "e3", a.EventID)
	ev = nextElectionEvent(t, gone, 5*time.Second)
	assert.Equal(t, lockcore.ElectionStateEvent, ev.Type)
	assert.True(t, ev.Gap)
	require.NotNil(t, ev.State.Leader)
	assert.Equal(t, "v5", ev.State.Leader.Value)

	_, err = w.svc.Observe(ctx, "e3", "not-an-id")
	require.ErrorIs(t, err, lockcore.ErrInvalid)
}

// TestElectionLogKeepsItsBytes: the log drops its oldest entries past ElectionLogBytes as well as
// past ElectionLog entries, and always keeps the last, however large.
func TestElectionLogKeepsItsBytes(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{ElectionLogBytes: 1024})
	ctx := context.Background()
	big := strings.Repeat("v", 300)
	a, err := w.svc.Campaign(ctx, lockcore.CampaignRequest{Election: "e4", Owner: "a", Value: "1" + big, TTL: 30 * time.Second})
	require.NoError(t, err)
	p2, err := w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e4", Token: a.Token, Value: "2" + big})
	require.NoError(t, err)
	st := observe(t, w.svc, "e4", a.EventID)
	assert.Equal(t, "2"+big, nextElectionEvent(t, st, 5*time.Second).Value, "two entries of ~400 bytes fit in 1 KiB")

	// Two more push the first two out: 1 KiB holds two entries of ~370 bytes, not three.
	p3, err := w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e4", Token: a.Token, Value: "3" + big})
	require.NoError(t, err)
	_, err = w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e4", Token: a.Token, Value: "4" + big})
	require.NoError(t, err)
	ev := nextElectionEvent(t, observe(t, w.svc, "e4", p2.EventID), 5*time.Second)
	assert.Equal(t, lockcore.ElectionStateEvent, ev.Type)
	assert.True(t, ev.Gap, "the second entry was dropped")
	ev = nextElectionEvent(t, observe(t, w.svc, "e4", p3.EventID), 5*time.Second)
	assert.Equal(t, "4"+big, ev.Value, "the last two are kept")

	// An entry larger than the bound is kept alone.
	huge, err := w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "e4", Token: a.Token, Value: strings.Repeat("h", 2000)})
	require.NoError(t, err)
	s, err := w.svc.Leader(ctx, "e4")
	require.NoError(t, err)
	assert.Equal(t, huge.EventID, s.LastEventID)
	assert.Equal(t, strings.Repeat("h", 2000), s.Leader.Value)
	ev = nextElectionEvent(t, observe(t, w.svc, "e4", p3.EventID), 5*time.Second)
	assert.True(t, ev.Gap, "only the last entry is left")
}

func TestElectionTokensAreTheirOwnKind(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	lock := w.hold(t, w.svc, "same", "a", time.Minute)
	a, err := w.svc.Campaign(ctx, lockcore.CampaignRequest{Election: "same", Owner: "a", Value: "v", TTL: time.Minute})
	require.NoError(t, err)
	_, err = w.svc.Proclaim(ctx, lockcore.ProclaimRequest{Election: "same", Token: lock.Token, Value: "x"})
	require.ErrorIs(t, err, lockcore.ErrInvalidToken)
	assert.Contains(t, err.Error(), "a lock's token, not an election's")
	_, err = w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef("same"), Token: a.Token})
	require.ErrorIs(t, err, lockcore.ErrInvalidToken)
	_, err = w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "same", Kind: lockcore.KindElection, Owner: "a", TTL: time.Second})
	require.True(t, errors.Is(err, lockcore.ErrInvalid))
}
