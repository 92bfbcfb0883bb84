package lockcore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// snapshotGateClient holds a real client's watch_snapshot calls, once armed, until released, and
// tells when a watch.lua drop is done: a snapshot slow on the wire racing the keeper's removal.
type snapshotGateClient struct {
	rueidis.Client
	armed    chan struct{} // closed: the next snapshot is held
	entered  chan struct{} // a held snapshot arrived (cap 1)
	release  chan struct{} // closed: held snapshots go on
	dropSent chan struct{} // a watch drop was done (cap 1)
}

func (c *snapshotGateClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	isScript := len(args) > 3 && (args[0] == "EVALSHA" || args[0] == "EVAL")
	switch {
	case isScript && args[2] == "7" && len(args) > 9 && strings.HasSuffix(args[9], ":watch"):
		select {
		case <-c.armed:
			select {
			case c.entered <- struct{}{}:
			default:
			}
			<-c.release
		default:
		}
	case isScript && args[2] == "1" && strings.HasSuffix(args[3], ":watch") && len(args) > 4 && args[4] == "drop":
		res := c.Client.Do(ctx, cmd)
		select {
		case c.dropSent <- struct{}{}:
		default:
		}
		return res
	}
	return c.Client.Do(ctx, cmd)
}

// TestClosingAStreamDuringItsCheckLeavesNoWatch: a stream closed (from another goroutine) while
// its expiry check's watch_snapshot is on the way must not leave the lock watched: the keeper
// removes the entry only after that snapshot, which would otherwise add it back for watchTTL.
func TestClosingAStreamDuringItsCheckLeavesNoWatch(t *testing.T) {
	r := harness.NewRedis(t, harness.RedisOptions{})
	client, err := rueidis.NewClient(ClientOption(r.Addr, ""))
	require.NoError(t, err)
	gate := &snapshotGateClient{Client: client, armed: make(chan struct{}), entered: make(chan struct{}, 1),
		release: make(chan struct{}), dropSent: make(chan struct{}, 1)}
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	s, err := New(gate, tokens, Options{KeyPrefix: harness.RandomPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(); client.Close() })
	released := false
	defer func() {
		if !released {
			close(gate.release)
		}
	}()

	ctx := context.Background()
	ref := LockRef("race")
	_, err = s.Acquire(ctx, AcquireRequest{Lock: "race", Owner: "o", TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	st, err := s.Watch(ctx, ref, "")
	require.NoError(t, err)
	ev, err := st.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, EventState, ev.Type)

	close(gate.armed) // the check at the hold's expiry is held on its way to Redis
	nextDone := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			if _, err := st.Next(c); err != nil {
				nextDone <- err
				return
			}
		}
	}()
	select {
	case <-gate.entered:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the expiry check did not run")
	}
	st.Close()
	// Give the keeper's removal its chance to go first (it must not, while the check is held).
	select {
	case <-gate.dropSent:
	case <-time.After(300 * time.Millisecond):
	}
	close(gate.release)
	released = true
	select {
	case <-nextDone:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Next did not return after Close")
	}

	watch := watchKey(s.keys(ref).lock)
	deadline := time.Now().Add(3 * time.Second)
	for r.MustDo(t, "EXISTS", watch) != "0" {
		require.True(t, time.Now().Before(deadline), "the lock is still watched (%s): %s", watch, r.MustDo(t, "HGETALL", watch))
		time.Sleep(10 * time.Millisecond) // polling
	}
}
