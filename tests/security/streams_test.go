package security

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

const (
	probTooManyStreams = "urn:leasegate:problem:too-many-streams"
)

// refusedStream opens base+path as an event stream that must be refused, and returns the
// refusal's status, Retry-After and problem body. A stream the gateway accepts instead fails t.
func refusedStream(t *testing.T, base, path string, h harness.Headers) (status int, retryAfter string, body *harness.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	require.NoError(t, err)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NotEqual(t, http.StatusOK, resp.StatusCode, "GET %s: the stream was accepted", path)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	return resp.StatusCode, resp.Header.Get("Retry-After"), &harness.Response{Status: resp.StatusCode, Body: b}
}

// TestEventStreamsHaveAPrincipalQuotaAndAReplicaCap: each principal may have
// LEASEGATE_QUOTA_STREAMS streams open on a replica (429 quota-exceeded past it) and the replica
// LEASEGATE_MAX_STREAMS in all (503 too-many-streams), both with Retry-After; a closed stream
// frees its place.
func TestEventStreamsHaveAPrincipalQuotaAndAReplicaCap(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, map[string]string{"LEASEGATE_QUOTA_STREAMS": "2", "LEASEGATE_MAX_STREAMS": "3"})
	url := e.Gateway.URL
	first := testkit.OpenEvents(t, url, "/locks/a1/events", e.as("inspect-only", ""))
	first.Expect(t, "state", "")
	testkit.OpenEvents(t, url, "/locks/a2/events", e.as("inspect-only", "")).Expect(t, "state", "")

	status, retry, p := refusedStream(t, url, "/locks/a3/events", e.as("inspect-only", ""))
	assert.Equal(t, http.StatusTooManyRequests, status, "%s", p.Body)
	assert.Equal(t, probQuotaExceeded, p.Str("type"))
	assert.Contains(t, p.Str("detail"), "2 open event streams")
	assert.NotEmpty(t, retry)

	testkit.OpenEvents(t, url, "/locks/b1/events", e.as("ops", "")).Expect(t, "state", "")
	status, retry, p = refusedStream(t, url, "/locks/b2/events", e.as("ops", ""))
	assert.Equal(t, http.StatusServiceUnavailable, status, "%s", p.Body)
	assert.Equal(t, probTooManyStreams, p.Str("type"))
	assert.Equal(t, "1", retry)

	first.Close()
	testkit.EventuallyPaced(t, 5*time.Second, "a closed stream frees its place", func() bool {
		st := testkit.OpenEventsIfAccepted(t, url, "/locks/a4/events", e.as("inspect-only", ""))
		return st != nil
	})
}

// TestEventStreamQuotaIsOnByDefaultWithAuth: with an auth file and no quota set, a principal may
// open 100 streams on a replica, not more (the outside probe had 2,000 accepted).
func TestEventStreamQuotaIsOnByDefaultWithAuth(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	for i := range 100 {
		testkit.OpenFewEvents(t, e.Gateway.URL, "/locks/n"+strconv.Itoa(i)+"/events", e.as("inspect-only", "")).Expect(t, "state", "")
	}
	status, _, p := refusedStream(t, e.Gateway.URL, "/locks/n100/events", e.as("inspect-only", ""))
	assert.Equal(t, http.StatusTooManyRequests, status, "%s", p.Body)
	assert.Equal(t, probQuotaExceeded, p.Str("type"))
	testkit.OpenEvents(t, e.Gateway.URL, "/locks/other/events", e.as("ops", "")).Expect(t, "state", "")
}

// TestOpenStreamsEndWhenTheirCredentialsDo: a stream whose principal is removed from the auth
// file, or loses the permission it needs, ends within seconds with a "closed" event saying why,
// and delivers nothing after it.
func TestOpenStreamsEndWhenTheirCredentialsDo(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	url := e.Gateway.URL
	revoked := testkit.OpenEvents(t, url, "/locks/billing.r/events", e.as("billing-2", ""))
	revoked.Expect(t, "state", "")
	narrowed := testkit.OpenEvents(t, url, "/locks/billing.n/events", e.as("reader", ""))
	narrowed.Expect(t, "state", "")
	kept := testkit.OpenEvents(t, url, "/locks/billing.k/events", e.as("billing", ""))
	kept.Expect(t, "state", "")

	ps := map[string]*testkit.Principal{}
	for name, p := range e.principals {
		if name == "billing-2" {
			continue // revoked
		}
		q := *p
		ps[name] = &q
	}
	ps["reader"].Permissions = ps["billing"].Permissions[:1] // lock, no longer inspect
	ps["reader"].Prefixes = []string{"billing."}
	changed := time.Now()
	writeAuthFile(t, e.path, testkit.AuthFile(ps), time.Now())

	gone := revoked.Expect(t, "closed", "")
	assert.Equal(t, "unauthenticated", gone.Str("reason"), "%v", gone.Data)
	assert.Equal(t, "billing.r", gone.Str("lock"))
	assert.NotEmpty(t, gone.Str("detail"))
	t.Logf("a revoked key's stream closed %.1f s after the auth file changed", gone.At.Sub(changed).Seconds())
	assert.Less(t, gone.At.Sub(changed), 5*time.Second)
	revoked.Ended(t, 5*time.Second)

	denied := narrowed.Expect(t, "closed", "")
	assert.Equal(t, "forbidden", denied.Str("reason"), "%v", denied.Data)
	assert.Contains(t, denied.Str("detail"), "inspect")
	narrowed.Ended(t, 5*time.Second)

	// The principal that kept its permissions keeps its stream.
	h := e.Client.Do(http.MethodPost, "/locks/billing.k", e.as("billing", ""), testkit.AcquireBody("b", 60000))
	require.Equal(t, http.StatusCreated, h.Status, "%s", h.Body)
	kept.Expect(t, "granted", "b")
}

// TestStreamsEndAtTheirMaximumLifetime: LEASEGATE_MAX_STREAM_LIFETIME ends every stream with a
// "closed" event (reason "lifetime"), authenticated or not.
func TestStreamsEndAtTheirMaximumLifetime(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_MAX_STREAM_LIFETIME": "2s"})
	s := testkit.OpenEvents(t, e.Gateway.URL, "/locks/short-lived/events", nil)
	st := s.Expect(t, "state", "")
	ev := s.Expect(t, "closed", "")
	assert.Equal(t, "lifetime", ev.Str("reason"))
	assert.GreaterOrEqual(t, ev.At.Sub(st.At), 1500*time.Millisecond)
	s.Ended(t, 5*time.Second)
}

// TestAStreamEndsWhenItsJWTExpires: a stream opened with a JWT ends with a "closed" event once the
// JWT is past its exp plus the gateway's 30 s leeway (here: exp 28 s ago, so 2 s after opening).
func TestAStreamEndsWhenItsJWTExpires(t *testing.T) {
	t.Parallel()
	e := newJWTEnv(t, false)
	exp := time.Now().Add(-28 * time.Second)
	tok, err := e.key.Sign(jwtClaims("system:serviceaccount:billing:watcher", []string{"billing."}, []string{"inspect"},
		func(c map[string]any) { c["exp"] = exp.Unix() }), true)
	require.NoError(t, err)
	s := testkit.OpenEvents(t, e.Gateway.URL, "/locks/billing.jwt/events", bearer(tok, ""))
	s.Expect(t, "state", "")
	ev := s.Expect(t, "closed", "")
	assert.Equal(t, "unauthenticated", ev.Str("reason"), "%v", ev.Data)
	lapsed := time.Unix(exp.Unix(), 0).Add(30 * time.Second)
	t.Logf("the stream closed %.1f s after its JWT lapsed", ev.At.Sub(lapsed).Seconds())
	assert.Less(t, ev.At.Sub(lapsed), 5*time.Second)
	s.Ended(t, 5*time.Second)
}
