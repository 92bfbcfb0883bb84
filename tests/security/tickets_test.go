package security

import (
	"fmt"
	"net/http"
	"strings"
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

// TestQueueTicketIsItsKinds: a lock's queue ticket is refused (400, nothing queued) on a semaphore
// acquire and on an election campaign of the same name, as a wrong-kind lease token is.
func TestQueueTicketIsItsKinds(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	h := e.Client.Do(http.MethodPost, "/locks/kinds", nil, testkit.AcquireBody("holder", 30000))
	require.Equal(t, http.StatusCreated, h.Status, "%s", h.Body)
	w := e.Client.Do(http.MethodPost, "/locks/kinds", nil, testkit.WaitBody("me", 5000, 50))
	require.Equal(t, http.StatusConflict, w.Status, "%s", w.Body)
	ticket := w.Str("queue_ticket")
	require.NotEmpty(t, ticket)
	for path, body := range map[string]string{
		"/semaphores/kinds": fmt.Sprintf(`{"owner":"me","permits":1,"ttl_ms":5000,"wait_ms":50,"queue_ticket":%q}`, ticket),
		"/elections/kinds":  fmt.Sprintf(`{"owner":"me","value":"v","ttl_ms":5000,"wait_ms":50,"queue_ticket":%q}`, ticket),
	} {
		r := e.Client.Do(http.MethodPost, path, nil, body)
		require.Equal(t, http.StatusBadRequest, r.Status, "a lock's ticket on %s: %s", path, r.Body)
		assert.Contains(t, string(r.Body), "queue_ticket", path)
	}
	own := e.Client.Do(http.MethodPost, "/locks/kinds", nil, fmt.Sprintf(`{"owner":"me","ttl_ms":5000,"wait_ms":50,"queue_ticket":%q}`, ticket))
	assert.Equal(t, http.StatusConflict, own.Status, "the lock it was handed for takes it: %s", own.Body)
}

// TestLongLastEventIDIsNotEchoed: a 60 KB Last-Event-ID is refused with a 400 that quotes only its
// start, not the whole header.
func TestLongLastEventIDIsNotEchoed(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodGet, "/elections/echo/events", harness.Headers{"Last-Event-ID": strings.Repeat("7", 60<<10)}, "")
	require.Equal(t, http.StatusBadRequest, r.Status, "%.300s", r.Body)
	assert.Less(t, len(r.Body), 2048, "the problem does not echo the header: %.300s", r.Body)
}
