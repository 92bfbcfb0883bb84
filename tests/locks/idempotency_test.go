package locks

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

func idem(key string, h harness.Headers) harness.Headers {
	out := harness.Headers{"Idempotency-Key": key}
	for k, v := range h {
		out[k] = v
	}
	return out
}

// TestRetriedReleaseDecrementsOnce holds a lease twice (reentrant) and sends a release whose
// client resets the connection right after sending, as a client killed mid-call would. Once the
// gateway applied it, the client's retry with the same Idempotency-Key must get the first answer
// and give back nothing more: the lease keeps its second hold.
func TestRetriedReleaseDecrementsOnce(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	g := e.Hold(t, e.Client, "twice", "w", 60000)
	tok := testkit.TokenHeader(g.Str("token"))
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodPost, "/locks/twice", tok, testkit.AcquireBody("w", 60000)).Status)

	raw := fmt.Sprintf("DELETE /locks/twice HTTP/1.1\r\nHost: x\r\nLease-Token: %s\r\nIdempotency-Key: rel-1\r\nContent-Length: 0\r\n\r\n", g.Str("token"))
	resetAfterSendingRaw(t, e.Gateway.URL, raw)
	harness.Eventually(t, 10*time.Second, "the release applied", func() bool {
		return e.Client.Do(http.MethodGet, "/locks/twice", nil, "").Int("holds") == 1
	})
	for range 2 {
		r := e.Client.Do(http.MethodDelete, "/locks/twice", idem("rel-1", tok), "")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		assert.Equal(t, false, r.JSON()["released"])
		assert.Equal(t, int64(1), r.Int("holds"), "the retry answers as the first release did")
	}
	st := e.Client.Do(http.MethodGet, "/locks/twice", nil, "")
	assert.Equal(t, true, st.JSON()["held"], "the retries gave back nothing more")
	assert.Equal(t, int64(1), st.Int("holds"))

	// Another key is another release.
	r := e.Client.Do(http.MethodDelete, "/locks/twice", idem("rel-2", tok), "")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, true, r.JSON()["released"])
	assert.False(t, e.Held("twice"))
}

// TestRetriedAcquireGetsTheSameLease retries a try-once acquire and a re-entry with their keys.
func TestRetriedAcquireGetsTheSameLease(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	first := e.Client.Do(http.MethodPost, "/locks/same", idem("acq-1", nil), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	again := e.Client.Do(http.MethodPost, "/locks/same", idem("acq-1", nil), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, again.Status, "the retry answers as the first did: %s", again.Body)
	assert.Equal(t, first.Str("token"), again.Str("token"))
	assert.Equal(t, first.Int("fence"), again.Int("fence"))
	// A replay says what the lease has left, never more than the first answer did.
	harness.Eventually(t, 5*time.Second, "the lease's TTL to run a little", func() bool {
		return e.Client.Do(http.MethodGet, "/locks/same", nil, "").Int("ttl_ms") < 59900
	})
	later := e.Client.Do(http.MethodPost, "/locks/same", idem("acq-1", nil), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, later.Status)
	assert.Less(t, later.Int("ttl_ms"), int64(59900), "the replay's ttl_ms is what is left")
	other := e.Client.Do(http.MethodPost, "/locks/same", idem("acq-1", nil), testkit.AcquireBody("someone-else", 60000))
	assert.Equal(t, http.StatusConflict, other.Status, "the key is the owner's only")

	tok := testkit.TokenHeader(first.Str("token"))
	for range 2 {
		re := e.Client.Do(http.MethodPost, "/locks/same", idem("re-1", tok), testkit.AcquireBody("w", 60000))
		require.Equal(t, http.StatusOK, re.Status, string(re.Body))
		assert.Equal(t, int64(2), re.Int("holds"), "a retried re-entry adds no hold")
	}
	for range 2 {
		rn := e.Client.Do(http.MethodPost, "/locks/same/renew", idem("rn-1", tok), `{"ttl_ms":45000}`)
		require.Equal(t, http.StatusOK, rn.Status, string(rn.Body))
		assert.Equal(t, int64(45000), rn.Int("ttl_ms"))
		assert.Equal(t, first.Int("fence"), rn.Int("fence"))
	}
	for _, key := range []string{"rel-a", "rel-b"} {
		require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/same", idem(key, tok), "").Status)
	}
	assert.False(t, e.Held("same"))
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/same/renew", idem("rn-1", tok), `{"ttl_ms":45000}`).Status,
		"a renewal retried after the release tells the truth")
	assert.Equal(t, http.StatusGone, e.Client.Do(http.MethodPost, "/locks/same", idem("re-1", tok), testkit.AcquireBody("w", 60000)).Status,
		"so does a re-entry")
	gone := e.Client.Do(http.MethodPost, "/locks/same", idem("acq-1", nil), testkit.AcquireBody("w", 60000))
	assert.Equal(t, http.StatusGone, gone.Status, "a retry after the lease is gone changes nothing: %s", gone.Body)
	assert.False(t, e.Held("same"))
}

func TestIdempotencyKeyIsValidated(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	for _, key := range []string{"has space", strings.Repeat("k", 256), "tab\tkey"} {
		r := e.Client.Do(http.MethodPost, "/locks/v", harness.Headers{"Idempotency-Key": key}, testkit.AcquireBody("w", 60000))
		assert.Equal(t, http.StatusBadRequest, r.Status)
		assert.Contains(t, string(r.Body), "Idempotency-Key")
	}
	assert.False(t, e.Held("v"), "nothing was acquired")
}

// TestRetriedWaitingAcquireGetsTheSameLease retries a long-poll that was granted by a hand-off.
func TestRetriedWaitingAcquireGetsTheSameLease(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	holder := e.Hold(t, e.Client, "handed", "holder", 60000)
	body := `{"owner":"w","ttl_ms":60000,"wait_ms":20000}`
	granted := make(chan *harness.Response, 1)
	go func() { granted <- e.Client.Do(http.MethodPost, "/locks/handed", idem("wait-1", nil), body) }()
	harness.Eventually(t, 10*time.Second, "the waiter in line", func() bool { return e.Waiters(t, "handed") == 1 })
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/handed", testkit.TokenHeader(holder.Str("token")), "").Status)
	first := <-granted
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	again := e.Client.Do(http.MethodPost, "/locks/handed", idem("wait-1", nil), body)
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	assert.Equal(t, first.Str("token"), again.Str("token"), "the retry is answered with the hand-off's lease")
	assert.Equal(t, int64(0), e.Waiters(t, "handed"), "and did not queue")
}

// TestUndeliveredKeyedGrantIsKeptForItsRetry sends an acquire with an Idempotency-Key and resets
// the connection at once, as a client killed mid-call: the gateway keeps the grant for the retry
// (instead of giving it back, which would answer that retry 410), and the retry collects it.
func TestUndeliveredKeyedGrantIsKeptForItsRetry(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	body := testkit.AcquireBody("w", 60000)
	resetAfterSendingRaw(t, e.Gateway.URL, fmt.Sprintf("POST /locks/kept HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k-1\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	harness.Eventually(t, 10*time.Second, "the acquire applied", func() bool { return e.Held("kept") })
	r := e.Client.Do(http.MethodPost, "/locks/kept", idem("k-1", nil), body)
	require.Equal(t, http.StatusCreated, r.Status, "the retry collects the grant: %s", r.Body)
	st := e.Client.Do(http.MethodGet, "/locks/kept", testkit.TokenHeader(r.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"])
	assert.Equal(t, int64(1), st.Int("holds"))
}
