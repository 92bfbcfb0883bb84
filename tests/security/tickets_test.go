package security

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestQueueTicketIsItsPrincipals: a waiter's queue ticket (from its 409) is bound to its
// principal. Another principal presenting it with the same owner string gets 400 and takes no
// place in line; the principal it was handed to resumes with it as ever.
func TestQueueTicketIsItsPrincipals(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	h := e.Client.Do(http.MethodPost, "/locks/billing.q", e.as("ops", ""), testkit.AcquireBody("holder", 30000))
	require.Equal(t, http.StatusCreated, h.Status, "%s", h.Body)
	ticketOf := func(principal string) string {
		t.Helper()
		w := e.Client.Do(http.MethodPost, "/locks/billing.q", e.as(principal, ""), testkit.WaitBody("me", 5000, 50))
		require.Equal(t, http.StatusConflict, w.Status, "%s", w.Body)
		require.NotEmpty(t, w.Str("queue_ticket"))
		return w.Str("queue_ticket")
	}
	resume := func(principal, ticket string) *harness.Response {
		body := fmt.Sprintf(`{"owner":"me","ttl_ms":5000,"wait_ms":50,"queue_ticket":%q}`, ticket)
		return e.Client.Do(http.MethodPost, "/locks/billing.q", e.as(principal, ""), body)
	}
	stolen := resume("billing-2", ticketOf("billing"))
	require.Equal(t, http.StatusBadRequest, stolen.Status, "another principal's ticket: %s", stolen.Body)
	assert.Contains(t, string(stolen.Body), "queue_ticket")
	own := resume("billing", ticketOf("billing"))
	assert.Equal(t, http.StatusConflict, own.Status, "its own principal resumes its place (and waits on): %s", own.Body)
}
