package locks

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestAWaiterWhoseGatewayFrozeHoldsOnlyItsClaim is what the waiter's confirmation of a hand-off
// buys (docs/performance.md, issue #39): a release hands the lock to the head of the line as a
// claim of 750 ms (lockcore's ClaimTTL), which only the waiter's own gateway turns into its TTL
// by confirming it. Here that gateway is frozen (SIGSTOP) as the lock is handed to its waiter,
// whose TTL is 60 s: the next waiter, on another gateway, gets the lock once the claim ran out,
// not a minute later. A hand-off that gave the waiter its TTL at once, saving the confirmation's
// round trip, would leave the lock to a frozen or dead gateway's client for that minute.
func TestAWaiterWhoseGatewayFrozeHoldsOnlyItsClaim(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	frozen := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	h := e.Client.Do(http.MethodPost, "/locks/claimed", nil, testkit.AcquireBody("holder", 60000))
	require.Equal(t, http.StatusCreated, h.Status, "%s", h.Body)
	first := testkit.StartWaiter(harness.NewClient(t, frozen.URL), ctx, "claimed", "on-the-frozen-gateway", 60000, 60000)
	harness.Eventually(t, 10*time.Second, "the first waiter in line", func() bool { return e.Waiters(t, "claimed") == 1 })
	second := testkit.StartWaiter(e.Client, ctx, "claimed", "next", 60000, 60000)
	harness.Eventually(t, 10*time.Second, "the second waiter in line", func() bool { return e.Waiters(t, "claimed") == 2 })

	require.NoError(t, frozen.Pause())
	t.Cleanup(func() { _ = frozen.Resume() })
	rel := e.Client.Do(http.MethodDelete, "/locks/claimed", testkit.TokenHeader(h.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	released := time.Now()
	got := testkit.Receive(t, second, 30*time.Second, "the second waiter's grant")
	gap := time.Since(released)
	require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
	t.Logf("the next waiter got the lock %v after the release; the frozen gateway's waiter had a 60 s TTL", gap.Round(time.Millisecond))
	assert.Less(t, gap, 15*time.Second, "held for the claim, not for the frozen waiter's TTL")

	// Resumed, the frozen gateway finds its claim gone: its waiter waits on, behind the holder.
	require.NoError(t, frozen.Resume())
	assert.Equal(t, "next", e.Client.Do(http.MethodGet, "/locks/claimed", nil, "").Str("owner"))
	cancel()
	<-first
}
