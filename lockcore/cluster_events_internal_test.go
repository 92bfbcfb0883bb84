package lockcore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// gatedClient holds back the subscriptions of a real client until gate is closed: a subscription
// (the process's, or a Cluster slot's) that is slow to be confirmed.
type gatedClient struct {
	rueidis.Client
	gate chan struct{}
}

func (c *gatedClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	if cmd := subscribe.Commands(); len(cmd) > 0 && (cmd[0] == "SSUBSCRIBE" || cmd[0] == "SUBSCRIBE") {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Client.Receive(ctx, subscribe, fn)
}

// TestStreamResyncsWhenItsSlotSubscriptionCameLate: on Redis Cluster a stream whose slot's first
// subscription is not confirmed within subscriptionWait takes its state anyway; the events
// published before the subscription are lost, so its first confirmation must make it resync.
func TestStreamResyncsWhenItsSlotSubscriptionCameLate(t *testing.T) {
	rig := harness.NewClusterRig(t, harness.ClusterOptions{})
	client, err := rueidis.NewClient(Tune(rueidis.ClientOption{InitAddress: rig.SeedAddrs()}))
	require.NoError(t, err)
	gated := &gatedClient{Client: client, gate: make(chan struct{})}
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	s, err := New(gated, tokens, Options{KeyPrefix: harness.RandomPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(); client.Close() })
	_, onCluster := s.dep.(*redisCluster)
	require.True(t, onCluster)

	ctx := context.Background()
	ref := LockRef("late")
	st, err := s.Watch(ctx, ref, "") // waits subscriptionWait for the held-back subscription
	require.NoError(t, err)
	defer st.Close()
	next := func() (Event, error) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return st.Next(c)
	}
	ev, err := next()
	require.NoError(t, err)
	require.Equal(t, EventState, ev.Type)
	require.Nil(t, ev.State.Exclusive)

	// Granted while nobody here is subscribed: its event is lost on the way.
	g, err := s.Acquire(ctx, AcquireRequest{Lock: "late", Owner: "o", TTL: time.Minute})
	require.NoError(t, err)
	close(gated.gate)

	ev, err = next()
	require.NoError(t, err, "the stream learns of the grant")
	require.Equal(t, EventState, ev.Type, "a resync")
	require.NotNil(t, ev.State.Exclusive)
	require.Equal(t, g.Fence, ev.State.Exclusive.Fence)
}

// TestStreamOpenedBeforeTheFirstSubscriptionReadsItsStateOnce: a stream opened on one Redis while
// the process's subscription is not confirmed yet (a gateway that just started) waits for it, and
// then reads its state once: the confirmation does not make it resync, so its next event is the
// next change, not a second EventState.
func TestStreamOpenedBeforeTheFirstSubscriptionReadsItsStateOnce(t *testing.T) {
	r := harness.NewRedis(t, harness.RedisOptions{})
	client, err := rueidis.NewClient(ClientOption(r.Addr, ""))
	require.NoError(t, err)
	gated := &gatedClient{Client: client, gate: make(chan struct{})}
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	s, err := New(gated, tokens, Options{KeyPrefix: harness.RandomPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(); client.Close() })

	ctx := context.Background()
	opened := make(chan *Stream, 1)
	go func() {
		st, err := s.Watch(ctx, LockRef("early"), "")
		if err != nil {
			t.Error(err)
		}
		opened <- st
	}()
	harness.Eventually(t, 5*time.Second, "the stream joined before the subscription", func() bool {
		s.events.mu.Lock()
		defer s.events.mu.Unlock()
		return len(s.events.locks) == 1
	})
	close(gated.gate)
	st := <-opened
	require.NotNil(t, st)
	defer st.Close()
	next := func() Event {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ev, err := st.Next(c)
		require.NoError(t, err)
		return ev
	}
	require.Equal(t, EventState, next().Type)
	_, err = s.Acquire(ctx, AcquireRequest{Lock: "early", Owner: "o", TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, EventGranted, next().Type, "the grant, not a second state")
}
