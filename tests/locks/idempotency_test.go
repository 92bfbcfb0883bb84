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
	assert.Equal(t, http.StatusUnprocessableEntity, other.Status, "the key is the owner's request only: another is refused, 422 (#27)")

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

// TestReusedIdempotencyKeyIsRefused: a key sent again with another request (another owner,
// another lock, another operation, another lease) is refused 422 idempotency-key-reused and
// changes nothing, as the IETF Idempotency-Key draft asks; the same request again is still a
// retry, and a waiting acquire's repeats (another wait_ms) are too.
func TestReusedIdempotencyKeyIsRefused(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	c := e.Client
	const reused = "urn:leasegate:problem:idempotency-key-reused"
	refused := func(r *harness.Response, what string) {
		t.Helper()
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", what, r.Body)
		assert.Equal(t, reused, r.Str("type"), what)
		assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	}

	first := c.Do(http.MethodPost, "/locks/k1", idem("key-a", nil), testkit.AcquireBody("alice", 60000))
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	again := c.Do(http.MethodPost, "/locks/k1", idem("key-a", nil), testkit.AcquireBody("alice", 60000))
	require.Equal(t, http.StatusCreated, again.Status, "the same request: a retry")
	assert.Equal(t, first.Int("fence"), again.Int("fence"))

	refused(c.Do(http.MethodPost, "/locks/k1", idem("key-a", nil), testkit.AcquireBody("mallory", 60000)), "another owner")
	refused(c.Do(http.MethodPost, "/locks/k2", idem("key-a", nil), testkit.AcquireBody("alice", 60000)), "another lock")
	refused(c.Do(http.MethodPost, "/locks/k1", idem("key-a", nil), testkit.AcquireBody("alice", 30000)), "another TTL")
	tok := testkit.TokenHeader(first.Str("token"))
	refused(c.Do(http.MethodDelete, "/locks/k1", idem("key-a", tok), ""), "a release")
	assert.False(t, e.Held("k2"), "nothing done on the other lock")
	st := c.Do(http.MethodGet, "/locks/k1", nil, "")
	assert.Equal(t, "alice", st.Str("owner"))
	assert.Equal(t, int64(1), st.Int("holds"), "nothing given back")

	rel := c.Do(http.MethodDelete, "/locks/k1", idem("key-r", tok), "")
	require.Equal(t, http.StatusOK, rel.Status, "%s", rel.Body)
	refused(c.Do(http.MethodPost, "/semaphores/k1", idem("key-r", nil), `{"owner":"alice","permits":2}`), "a semaphore acquire")

	// A long wait sent as several requests with one key, each with the wait it has left.
	b := e.Hold(t, c, "k3", "bob", 60000)
	for _, wait := range []int{300, 200} {
		r := c.Do(http.MethodPost, "/locks/k3", idem("key-w", nil), fmt.Sprintf(`{"owner":"carol","ttl_ms":60000,"wait_ms":%d}`, wait))
		require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	}
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/k3", testkit.TokenHeader(b.Str("token")), "").Status)
	w := c.Do(http.MethodPost, "/locks/k3", idem("key-w", nil), `{"owner":"carol","ttl_ms":60000,"wait_ms":100}`)
	require.Equal(t, http.StatusCreated, w.Status, "%s", w.Body)
	assert.Equal(t, "carol", w.Str("owner"))
}
