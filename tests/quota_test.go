package tests

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const probQuotaExceeded = "urn:leasegate:problem:quota-exceeded"

// TestQuotaRatePerPrincipal: LEASEGATE_QUOTA_RATE/BURST is a token bucket per principal on the
// replica: past its burst a principal gets 429 quota-exceeded with Retry-After, and nothing
// changes; another principal is not slowed.
func TestQuotaRatePerPrincipal(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, map[string]string{"LEASEGATE_QUOTA_RATE": "1", "LEASEGATE_QUOTA_BURST": "3"})
	for i := range 3 {
		r := e.client.Do(http.MethodGet, "/locks/billing.r"+strconv.Itoa(i), e.as("billing", ""), "")
		require.Equal(t, http.StatusOK, r.Status, "within the burst: %s", r.Body)
	}
	r := e.client.Do(http.MethodPost, "/locks/billing.over", e.as("billing", ""), acquireBody("b", 5000))
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	assert.Equal(t, probQuotaExceeded, r.Str("type"))
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Positive(t, r.Int("retry_after_ms"))
	assert.Equal(t, false, e.client.Do(http.MethodGet, "/locks/billing.over", e.as("ops", ""), "").JSON()["held"],
		"the refused acquire changed nothing")
	ok := e.client.Do(http.MethodGet, "/locks/billing.x", e.as("billing-2", ""), "")
	assert.Equal(t, http.StatusOK, ok.Status, "another principal has its own bucket: %s", ok.Body)
}

// TestQuotaParkedPerPrincipal: LEASEGATE_QUOTA_PARKED bounds a principal's waiting requests
// parked on the replica at once; one more is 429 at once, another principal still parks, and the
// parked one is served as ever.
func TestQuotaParkedPerPrincipal(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, map[string]string{"LEASEGATE_QUOTA_PARKED": "1"})
	h := e.client.Do(http.MethodPost, "/locks/billing.p", e.as("ops", ""), acquireBody("holder", 30000))
	require.Equal(t, http.StatusCreated, h.Status, "%s", h.Body)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	parked := make(chan int, 2)
	go func() {
		parked <- e.client.DoContext(ctx, http.MethodPost, "/locks/billing.p", e.as("billing", ""), waitBody("w1", 5000, 20000)).Status
	}()
	eventually(t, 10*time.Second, "billing's waiter parked", func() bool { return e.opsWaiters("billing.p") == 1 })

	over := e.client.Do(http.MethodPost, "/locks/billing.p", e.as("billing", ""), waitBody("w2", 5000, 20000))
	require.Equal(t, http.StatusTooManyRequests, over.Status, "%s", over.Body)
	assert.Equal(t, probQuotaExceeded, over.Str("type"))
	assert.Equal(t, int64(1), e.opsWaiters("billing.p"), "the refused request never queued")
	try := e.client.Do(http.MethodPost, "/locks/billing.p", e.as("billing", ""), acquireBody("w3", 5000))
	assert.Equal(t, http.StatusConflict, try.Status, "a try-once is not parked: %s", try.Body)

	go func() {
		parked <- e.client.DoContext(ctx, http.MethodPost, "/locks/billing.p", e.as("billing-2", ""), waitBody("w4", 5000, 20000)).Status
	}()
	eventually(t, 10*time.Second, "billing-2's waiter parked too", func() bool { return e.opsWaiters("billing.p") == 2 })

	rel := e.client.Do(http.MethodDelete, "/locks/billing.p", e.as("ops", h.Str("token")), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	assert.Equal(t, http.StatusCreated, <-parked, "the parked waiter is served")
}

// opsWaiters is how many wait for lock, as the ops principal sees it.
func (e *authEnv) opsWaiters(lock string) int64 {
	return e.client.Do(http.MethodGet, "/locks/"+lock, e.as("ops", ""), "").Int("waiters")
}
