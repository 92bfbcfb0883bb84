package security

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestTokensAlteredCharacterByCharacter changes a valid token one character at a time, at every
// position: each altered token is refused (400 invalid-lease-token) on release, renew and
// re-entry, no script runs, and the lease still holds.
func TestTokensAlteredCharacterByCharacter(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls on one Redis server")
	e := testkit.NewEnv(t, nil)
	r := e.Client.Do(http.MethodPost, "/locks/tamper", nil, testkit.AcquireBody("w1", 60000))
	require.Equal(t, http.StatusCreated, r.Status)
	token := r.Str("token")
	before := testkit.EvalCalls(t, e)
	routes := []struct{ method, suffix, body string }{
		{http.MethodDelete, "", ""},
		{http.MethodPost, "/renew", ""},
		{http.MethodPost, "", testkit.AcquireBody("w1", 1000)},
	}
	for i := range len(token) {
		altered := []byte(token)
		altered[i] = flipped(altered[i])
		rt := routes[i%len(routes)]
		resp := e.Client.Do(rt.method, "/locks/tamper"+rt.suffix, testkit.TokenHeader(string(altered)), rt.body)
		if !assert.Equal(t, http.StatusBadRequest, resp.Status, "position %d: %s", i, resp.Body) {
			continue
		}
		assert.Equal(t, probInvalidToken, resp.Str("type"), "position %d", i)
	}
	assert.Equal(t, before, testkit.EvalCalls(t, e), "an altered token reached Redis")
	held := e.Client.Do(http.MethodGet, "/locks/tamper", testkit.TokenHeader(token), "")
	assert.Equal(t, true, held.JSON()["yours"])
	assert.Equal(t, r.Int("fence"), held.Int("fence"))
}

// flipped is another character of the token alphabet (base64url and '.').
func flipped(c byte) byte {
	if c == 'A' {
		return 'B'
	}
	return 'A'
}

// TestOversizedHeadersAndSlowClients: headers over the 64 KB limit are refused (431, a
// headers-too-large problem; over 256 KB net/http's own plain-text 431) without touching Redis, a
// client that never finishes its headers is cut off after the server's 5 s
// header timeout, and 500 idle connections do not stop the gateway from serving.
func TestOversizedHeadersAndSlowClients(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls on one Redis server")
	e := testkit.NewEnv(t, nil)
	before := testkit.EvalCalls(t, e)
	big := e.Client.Do(http.MethodPost, "/locks/big", harness.Headers{"Lease-Token": strings.Repeat("A", 70<<10)}, testkit.AcquireBody("w", 1000))
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, big.Status, "%s", big.Body)
	assert.Equal(t, "application/problem+json", big.Header.Get("Content-Type"))
	assert.Equal(t, "urn:leasegate:problem:headers-too-large", big.Str("type"))
	// Past four times the limit net/http stops reading and answers itself, in plain text (docs/api.md
	// says so): a plain client, not the spec-checking one.
	req, err := http.NewRequest(http.MethodGet, e.Gateway.URL+"/locks/big", nil)
	require.NoError(t, err)
	req.Header.Set("Lease-Token", strings.Repeat("A", 300<<10))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	assert.Equal(t, before, testkit.EvalCalls(t, e))
	assert.Equal(t, false, e.Client.Do(http.MethodGet, "/locks/big", nil, "").JSON()["held"])

	addr := strings.TrimPrefix(e.Gateway.URL, "http://")
	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = fmt.Fprintf(slow, "POST /locks/slow HTTP/1.1\r\nHost: x\r\n") // and never the rest
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(15*time.Second)))
	_, err = bufio.NewReader(slow).ReadString('\n')
	assert.Error(t, err, "the server closed the connection")
	assert.Less(t, time.Since(start), 12*time.Second, "cut off by the header timeout, not the test's deadline")

	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 500 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		idle = append(idle, c)
	}
	ok := e.Client.Do(http.MethodPost, "/locks/after-the-crowd", nil, testkit.AcquireBody("w1", 60000))
	assert.Equal(t, http.StatusCreated, ok.Status, "served beside 500 idle connections")
	assert.Equal(t, "w1", e.Client.Do(http.MethodGet, "/locks/after-the-crowd", nil, "").Str("owner"))
}
