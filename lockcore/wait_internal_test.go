package lockcore

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// busyClient answers a real client's waiting enqueues (acquire.lua in mode "wait"), once armed,
// with a BUSY error from the real Redis, as a Redis running a long script would; it tells when one
// arrived.
type busyClient struct {
	rueidis.Client
	armed   chan struct{} // closed: waiting enqueues are refused
	entered chan struct{} // a refused enqueue arrived (cap 1)
}

func (c *busyClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	if len(args) > 3 && (args[0] == "EVALSHA" || args[0] == "EVAL") && slices.Contains(args, "wait") {
		select {
		case <-c.armed:
			select {
			case c.entered <- struct{}{}:
			default:
			}
			return c.Client.Do(ctx, c.Client.B().Eval().Script("return redis.error_reply('BUSY refused by the test')").Numkeys(0).Build())
		default:
		}
	}
	return c.Client.Do(ctx, cmd)
}

// TestLeavingWhileTheEnqueueRetriesEndsTheWait: a waiter whose caller leaves while its enqueue
// retries a Redis that answers BUSY (it would until the wait runs out) returns at once. The
// enqueue's context is not a child of the caller's (waitTurn.callCtx): the waiting goroutine must
// end it when the caller's ends.
func TestLeavingWhileTheEnqueueRetriesEndsTheWait(t *testing.T) {
	r := harness.NewRedis(t, harness.RedisOptions{})
	client, err := rueidis.NewClient(ClientOption(r.Addr, ""))
	require.NoError(t, err)
	gate := &busyClient{Client: client, armed: make(chan struct{}), entered: make(chan struct{}, 1)}
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	s, err := New(gate, tokens, Options{KeyPrefix: harness.RandomPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(); client.Close() })

	_, err = s.Acquire(context.Background(), AcquireRequest{Lock: "stall", Owner: "holder", TTL: time.Minute})
	require.NoError(t, err)
	close(gate.armed)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, AcquireRequest{Lock: "stall", Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
		done <- err
	}()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		require.Fail(t, "the waiter never tried to enqueue")
	}
	cancel()
	select {
	case err := <-done:
		assert.Error(t, err, "a wait whose caller left returns no grant")
	case <-time.After(5 * time.Second):
		require.Fail(t, "the wait outlived its caller: its enqueue's retries did not end with the caller's context")
	}
}

// TestAStoppedWaiterStillTakesItsGrant: a stop (the wait's deadline, or Close) leaves one nudge in
// the waiter's channel however often it comes, and a grant sent after it still finds room, so that
// the waiter takes the grant rather than passing it on (an event that is in wins, see await).
// The heartbeat is an hour apart: a beat's check of the lock, sent to the waiter, took the room
// the grant was to find (CI, on a loaded machine; the beat is what finds a lost grant in real use).
func TestAStoppedWaiterStillTakesItsGrant(t *testing.T) {
	_, s, _ := newInternalServiceWith(t, Options{Heartbeat: time.Hour, Liveness: 3 * time.Hour, ClaimTTL: time.Hour})

	w, err := s.waiters.join(LockRef("stopped"), "lease-1")
	require.NoError(t, err)
	defer s.waiters.leave(w)
	var stops sync.WaitGroup
	for range 3 { // the deadline's timer and Close, racing
		stops.Go(w.stop)
	}
	stops.Wait()
	s.waiters.deliver("lease-1", waitEvent{fence: 7})
	ev, in := w.pending()
	require.True(t, in, "the grant found room beside the nudge")
	assert.Equal(t, int64(7), ev.fence)
	_, in = w.pending()
	assert.False(t, in, "one nudge, one grant: nothing else")
}
