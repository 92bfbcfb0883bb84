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

// TestMetricsLabelsAreBoundedWhateverTheMethod (issue 26, finding 1): anyone, without a key, once
// grew /metrics without end by sending requests with distinct methods (each became a label value
// kept until restart). Methods outside the routes' own are one label value, "other".
func TestMetricsLabelsAreBoundedWhateverTheMethod(t *testing.T) {
	t.Parallel()
	r := harness.NewRedis(t, harness.RedisOptions{})
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: r})
	size := func() int {
		t.Helper()
		series := testkit.Scrape(t, gw.URL)
		n := 0
		for k := range series {
			if strings.HasPrefix(k, "leasegate_http_") {
				n += len(k)
			}
		}
		return n
	}
	send := func(method, path string) {
		t.Helper()
		req, err := http.NewRequest(method, gw.URL+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	send("XFIRST", "/locks/a") // the "other" series exist from here on
	send("XFIRST", "/nowhere")
	send(http.MethodGet, "/metrics") // and the scrape's own
	before := size()
	for i := range 300 {
		method := fmt.Sprintf("X%d%s", i, strings.Repeat("Q", 500))
		send(method, "/locks/a")
		send(method, "/nowhere")
	}
	after := size()
	assert.Zero(t, after-before, "the request series grew by %d bytes of names after 600 requests with odd methods", after-before)
	series := testkit.Scrape(t, gw.URL)
	assert.Contains(t, series, `leasegate_http_requests_total{method="other",route="unmatched",status="405"}`)
	for k := range series {
		assert.NotContains(t, k, "QQQQ", "an odd method became a label value")
	}
}

// TestLockNameIsDecodedOnce (issue 26, finding 4): /locks/%2562.dbl once acted on "b.dbl" (net/url
// decoded %25, and the handler decoded %62 again), while a proxy that decodes once sees "%62.dbl".
// The path is decoded exactly once, for locks and semaphores alike.
func TestLockNameIsDecodedOnce(t *testing.T) {
	t.Parallel()
	r := harness.NewRedis(t, harness.RedisOptions{})
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: r})
	c := harness.NewClient(t, gw.URL)
	for _, path := range []string{"/locks/%2562.dbl", "/locks/a%3Ab%2562", "/semaphores/%2562.dbl"} {
		body := testkit.AcquireBody("sly", 60000)
		if strings.HasPrefix(path, "/semaphores/") {
			body = testkit.PermitBody("sly", 2, 60000, 0)
		}
		res := c.Do(http.MethodPost, path, nil, body)
		assert.Equal(t, http.StatusBadRequest, res.Status, "%s: %s", path, res.Body)
		assert.Equal(t, "urn:leasegate:problem:invalid-lock-name", res.Str("type"), path)
		assert.Contains(t, res.Str("detail"), "%62", "%s: the name is the once-decoded one", path)
	}
	assert.Equal(t, false, c.Do(http.MethodGet, "/locks/b.dbl", nil, "").JSON()["held"], "b.dbl was not taken")
	keys, err := r.DoList("KEYS", gw.KeyPrefix+"*")
	require.NoError(t, err)
	assert.Empty(t, keys, "refused requests changed nothing in Redis")

	g := c.Do(http.MethodPost, "/locks/orders%3A42", nil, testkit.AcquireBody("fair", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	assert.Equal(t, "orders:42", g.Str("lock"), "an escape net/url keeps raw is decoded once")
}
