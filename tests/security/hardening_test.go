package security

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/testkit"
)

// TestRepeatedHeadersAreRefused: a request with two Lease-Token (or Idempotency-Key) headers is a
// 400 on every route, and changes nothing: which one a proxy in front acted on is unknowable.
func TestRepeatedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls on one Redis server")
	e := testkit.NewEnv(t, nil)
	held := e.Client.Do(http.MethodPost, "/locks/twice", nil, testkit.AcquireBody("w1", 60000))
	require.Equal(t, http.StatusCreated, held.Status)
	other := e.Client.Do(http.MethodPost, "/locks/other", nil, testkit.AcquireBody("w1", 60000))
	require.Equal(t, http.StatusCreated, other.Status)
	tok, otherTok := held.Str("token"), other.Str("token")

	for _, tc := range []struct{ method, path, header, body string }{
		{http.MethodDelete, "/locks/twice", "Lease-Token", ""},
		{http.MethodPost, "/locks/twice/renew", "Lease-Token", ""},
		{http.MethodPost, "/locks/twice", "Lease-Token", testkit.AcquireBody("w1", 1000)},
		{http.MethodGet, "/locks/twice", "Lease-Token", ""},
		{http.MethodDelete, "/locks/twice", "Idempotency-Key", ""},
	} {
		before := testkit.EvalCalls(t, e)
		req, err := http.NewRequest(tc.method, e.Gateway.URL+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		if tc.header == "Lease-Token" {
			req.Header.Add("Lease-Token", tok)
			req.Header.Add("Lease-Token", otherTok)
		} else {
			req.Header.Set("Lease-Token", tok)
			req.Header.Add("Idempotency-Key", "k1")
			req.Header.Add("Idempotency-Key", "k2")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s: %s", tc.method, tc.path, body)
		assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		assert.Contains(t, string(body), probInvalidRequest)
		assert.Contains(t, string(body), "appears more than once")
		assert.Equal(t, before, testkit.EvalCalls(t, e), "%s %s ran a script", tc.method, tc.path)
	}
	r := e.Client.Do(http.MethodGet, "/locks/twice", testkit.TokenHeader(tok), "")
	assert.Equal(t, true, r.JSON()["yours"], "still held by its lease")
	assert.Equal(t, held.Int("fence"), r.Int("fence"))
}
