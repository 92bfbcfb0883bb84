package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// TestListElectionsShowsAVacantElectionWithCandidates: ListElections lists a led election with its
// leader's latest value, leaves out an election held by a grant nobody was told of (its gateway
// died before the announcement) while nobody waits for it, and lists it as vacant, with its
// candidate, once one waits.
func TestListElectionsShowsAVacantElectionWithCandidates(t *testing.T) {
	t.Parallel()
	lossy, svc, other := crashWorld(t)
	ctx := context.Background()

	led, err := other.Campaign(ctx, lockcore.CampaignRequest{Election: "list.led", Owner: "a", Value: "v1", TTL: 30 * time.Second})
	require.NoError(t, err)
	_, err = other.Proclaim(ctx, lockcore.ProclaimRequest{Election: "list.led", Token: led.Token, Value: "v2"})
	require.NoError(t, err)
	lossy.armed.Store(true)
	_, err = svc.Campaign(ctx, lockcore.CampaignRequest{Election: "list.ghost", Owner: "ghost", Value: "g", TTL: 30 * time.Second,
		IdempotencyKey: "ghost-1"})
	require.ErrorIs(t, err, lockcore.ErrUnavailable)

	byName := func() map[string]lockcore.ElectionState {
		out := map[string]lockcore.ElectionState{}
		cursor := ""
		for {
			page, next, err := other.ListElections(ctx, "list.", cursor, 100)
			require.NoError(t, err)
			for _, st := range page {
				out[st.Election] = st
			}
			if cursor = next; cursor == "" {
				return out
			}
		}
	}
	got := byName()
	require.Contains(t, got, "list.led")
	if l := got["list.led"].Leader; assert.NotNil(t, l) {
		assert.Equal(t, "a", l.Owner)
		assert.Equal(t, "v2", l.Value, "the proclaimed value")
		assert.Equal(t, led.Fence, l.Fence)
	}
	assert.NotContains(t, got, "list.ghost", "held by an unannounced grant, nobody waiting: nobody leads it")

	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := other.Campaign(waitCtx, lockcore.CampaignRequest{Election: "list.ghost", Owner: "b", Value: "b", TTL: 30 * time.Second,
			Wait: 20 * time.Second})
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done })
	harness.Eventually(t, 10*time.Second, "b waits for list.ghost", func() bool {
		st, err := other.Leader(ctx, "list.ghost")
		return err == nil && st.Candidates == 1
	})
	got = byName()
	if assert.Contains(t, got, "list.ghost") {
		assert.Nil(t, got["list.ghost"].Leader, "vacant")
		assert.Equal(t, int64(1), got["list.ghost"].Candidates)
	}
	assert.Len(t, got, 2)
}
