package lockcore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// TestReleaseRacingTheEnqueueWakesTheWaiter races a holder's release (on another replica) against a
// waiter's first try and enqueue, 200 times. Whichever lands first, the waiter must be granted
// promptly by the hand-off, never left to its wait timeout: its wait is one minute, and each round
// must end in well under that. The holder uses a long lease, so only a release can free the lock,
// and the waiter's replica tends its locks only hourly, so only the hand-off message can wake it:
// a lost wake-up hangs the round.
func TestReleaseRacingTheEnqueueWakesTheWaiter(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{Heartbeat: time.Hour, Liveness: 2 * time.Hour})
	other := w.replica(t, lockcore.Options{})
	ctx := context.Background()
	const lock = "race"
	var lastFence int64
	for i := range 200 {
		holder := w.hold(t, other, lock, "holder", time.Hour)
		start := make(chan struct{})
		released := make(chan error, 1)
		go func() {
			<-start
			_, err := other.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: holder.Token})
			released <- err
		}()
		res := make(chan acquired, 1)
		go func() {
			<-start
			g, err := w.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: lock, Owner: "waiter", TTL: time.Minute, Wait: time.Minute})
			res <- acquired{grant: g, err: err}
		}()
		close(start)
		require.NoError(t, receive(t, released, 10*time.Second, "the release"))
		r := receive(t, res, 10*time.Second, fmt.Sprintf("round %d: the waiter's grant (a lost wake-up would hang until its 1 min wait)", i))
		require.NoError(t, r.err, "round %d", i)
		assert.Greater(t, r.grant.Fence, holder.Fence, "round %d", i)
		assert.Greater(t, r.grant.Fence, lastFence, "round %d", i)
		lastFence = r.grant.Fence
		rel, err := w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: r.grant.Token})
		require.NoError(t, err)
		require.True(t, rel.Released, "round %d: nobody else holds or waits", i)
	}
}
