package lockcore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// TestRenewalsRacingAHandOffNeverReachTheNextHolder: a renewal keeping the TTL (0) keeps it; then
// the holder renews to a long TTL in a loop while it releases to a waiter (whose confirmation,
// with nobody behind it, takes renew.lua's fast path like the renewals). Every renewal sent after
// the release was answered must be refused, and none may land on the new holder: its hold keeps
// the TTL it asked for, not the old holder's.
func TestRenewalsRacingAHandOffNeverReachTheNextHolder(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, lockcore.Options{})
	ctx := context.Background()
	for round := range 20 {
		lock := "race-" + strconv.Itoa(round)
		a := w.hold(t, w.svc, lock, "a", time.Minute)
		kept, err := w.svc.Renew(ctx, lockcore.LockRef(lock), a.Token, 0) // 0: keep the lease's TTL
		require.NoError(t, err)
		require.Equal(t, time.Minute, kept.TTL)
		require.Equal(t, a.Fence, kept.Fence)
		wait := acquireAsync(ctx, w.svc, lockcore.AcquireRequest{Lock: lock, Owner: "b", TTL: 3 * time.Second, Wait: time.Minute})
		w.awaitWaiters(t, lock, 1)

		renewed := make(chan error, 1)
		released := make(chan struct{})
		go func() {
			for {
				after := false
				select {
				case <-released:
					after = true
				default:
				}
				_, err := w.svc.Renew(ctx, lockcore.LockRef(lock), a.Token, 10*time.Minute)
				if after { // the first renewal sent after the release was answered
					renewed <- err
					return
				}
				if err != nil {
					renewed <- err
					return
				}
			}
		}()
		_, err = w.svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef(lock), Token: a.Token})
		require.NoError(t, err)
		close(released)
		require.ErrorIs(t, <-renewed, lockcore.ErrLeaseLost, "round %d: a renewal after the release is refused", round)

		b := receive(t, wait, 5*time.Second, "b's grant")
		require.NoError(t, b.err)
		pttl, err := strconv.ParseInt(w.redis.MustDo(t, "PTTL", w.key(lock, "")), 10, 64)
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, int64(3000), "round %d: b's hold keeps its own TTL", round)
		_, err = w.svc.Renew(ctx, lockcore.LockRef(lock), a.Token, 10*time.Minute)
		assert.True(t, errors.Is(err, lockcore.ErrLeaseLost), "round %d: a's token renews nothing: %v", round, err)
	}
}
