package lockcore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// lostAnnouncementClient loses the answer of the next election.lua "elect" call once armed, before
// it reaches Redis: from Redis's side, what a gateway that died between a campaign's grant and its
// announcement leaves behind.
type lostAnnouncementClient struct {
	rueidis.Client
	armed atomic.Bool
}

func (c *lostAnnouncementClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	if (len(args) > 8 && (args[0] == "EVALSHA" || args[0] == "EVAL") && args[2] == "5" && args[8] == "elect") && c.armed.CompareAndSwap(true, false) {
		return rueidis.NewErrorResult(errors.New("connection reset (the gateway died)"))
	}
	return c.Client.Do(ctx, cmd)
}

// crashWorld is a Service whose announcements can be lost, and a second one that loses nothing
// (another gateway replica) on the same Redis and prefix.
func crashWorld(t *testing.T) (lossy *lostAnnouncementClient, svc, other *lockcore.Service) {
	t.Helper()
	r := harness.NewRedis(t, harness.RedisOptions{})
	prefix := harness.RandomPrefix()
	tokens, err := lockcore.NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	start := func(c rueidis.Client) *lockcore.Service {
		s, err := lockcore.New(c, tokens, lockcore.Options{KeyPrefix: prefix})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close(); c.Close() })
		return s
	}
	c1, err := rueidis.NewClient(lockcore.ClientOption(r.Addr, ""))
	require.NoError(t, err)
	lossy = &lostAnnouncementClient{Client: c1}
	c2, err := rueidis.NewClient(lockcore.ClientOption(r.Addr, ""))
	require.NoError(t, err)
	return lossy, start(lossy), start(c2)
}

// TestAGrantNeverAnnouncedIsNeverALeader: a campaign granted whose announcement was lost (its
// gateway died in between; here its Idempotency-Key keeps the grant, as a crash does) is no
// leader to anyone: reads and observers do not see it, it runs out with its TTL unannounced (no
// `vacant` either), and the next candidate is elected with a higher fence.
func TestAGrantNeverAnnouncedIsNeverALeader(t *testing.T) {
	t.Parallel()
	lossy, svc, other := crashWorld(t)
	ctx := context.Background()
	st := observe(t, other, "crash", "")
	require.Equal(t, lockcore.ElectionStateEvent, nextElectionEvent(t, st, 5*time.Second).Type)

	lossy.armed.Store(true)
	_, err := svc.Campaign(ctx, lockcore.CampaignRequest{Election: "crash", Owner: "ghost", Value: "g", TTL: 400 * time.Millisecond,
		IdempotencyKey: "ghost-1"})
	require.ErrorIs(t, err, lockcore.ErrUnavailable)
	s, err := other.Leader(ctx, "crash")
	require.NoError(t, err)
	assert.Nil(t, s.Leader, "a grant nobody was told of leads nobody")

	b, err := other.Campaign(ctx, lockcore.CampaignRequest{Election: "crash", Owner: "b", Value: "b", TTL: 30 * time.Second, Wait: 10 * time.Second})
	require.NoError(t, err)
	ev := nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionElected, ev.Type, "the unannounced grant ran out unannounced: no vacant")
	assert.Equal(t, "b", ev.Owner)
	assert.Equal(t, b.Fence, ev.Fence)
	assert.Positive(t, b.Waited, "b waited for the unannounced grant to run out")
}

// TestARetryAnnouncesTheGrantItCollects: the campaign's retry with its Idempotency-Key collects
// the same grant and announces it, once.
func TestARetryAnnouncesTheGrantItCollects(t *testing.T) {
	t.Parallel()
	lossy, svc, other := crashWorld(t)
	ctx := context.Background()
	st := observe(t, other, "retry", "")
	require.Equal(t, lockcore.ElectionStateEvent, nextElectionEvent(t, st, 5*time.Second).Type)
	req := lockcore.CampaignRequest{Election: "retry", Owner: "a", Value: "v", TTL: 30 * time.Second, IdempotencyKey: "a-1"}
	lossy.armed.Store(true)
	_, err := svc.Campaign(ctx, req)
	require.ErrorIs(t, err, lockcore.ErrUnavailable)

	a, err := other.Campaign(ctx, req) // on another replica, as a client retries
	require.NoError(t, err)
	ev := nextElectionEvent(t, st, 5*time.Second)
	assert.Equal(t, lockcore.ElectionElected, ev.Type)
	assert.Equal(t, a.Fence, ev.Fence)
	assert.Equal(t, a.EventID, ev.ID)
	again, err := svc.Campaign(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, a.EventID, again.EventID, "announced once")
	assert.Equal(t, a.Fence, again.Fence)
}

// TestAnAnnouncementThatFailsGivesTheGrantBack: without an Idempotency-Key nobody would announce
// a grant whose announcement failed, so it is given back at once.
func TestAnAnnouncementThatFailsGivesTheGrantBack(t *testing.T) {
	t.Parallel()
	lossy, svc, other := crashWorld(t)
	ctx := context.Background()
	lossy.armed.Store(true)
	_, err := svc.Campaign(ctx, lockcore.CampaignRequest{Election: "back", Owner: "a", Value: "v", TTL: 30 * time.Second})
	require.ErrorIs(t, err, lockcore.ErrUnavailable)
	b, err := other.Campaign(ctx, lockcore.CampaignRequest{Election: "back", Owner: "b", Value: "w", TTL: 30 * time.Second})
	require.NoError(t, err, "the failed campaign's grant was given back")
	assert.Equal(t, "w", b.Value)
}
