package testkit

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// StreamProxy is a reverse proxy in front of a gateway that counts the events streams it passes
// on, and can cut them (CloseClientConnections) or refuse new ones, as a network would.
type StreamProxy struct {
	Server  *httptest.Server
	Opened  atomic.Int64 // events streams answered 200 (their header came back), in all
	Active  atomic.Int64 // events requests in progress now
	Blocked atomic.Bool  // answer 503 to new events streams
}

// NewStreamProxy starts a StreamProxy in front of the gateway at URL gateway; it closes when t ends.
func NewStreamProxy(t *testing.T, gateway string) *StreamProxy {
	t.Helper()
	target, err := url.Parse(gateway)
	require.NoError(t, err)
	p := &StreamProxy{}
	rp := httputil.NewSingleHostReverseProxy(target) // flushes text/event-stream at once
	rp.ModifyResponse = func(resp *http.Response) error {
		if isEvents(resp.Request) && resp.StatusCode == http.StatusOK {
			p.Opened.Add(1)
		}
		return nil
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isEvents(r) {
			if p.Blocked.Load() {
				http.Error(w, "blocked by the test", http.StatusServiceUnavailable)
				return
			}
			p.Active.Add(1)
			defer p.Active.Add(-1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		p.Server.CloseClientConnections() // streams of leases still alive would hold Close up
		p.Server.Close()
	})
	return p
}

func isEvents(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/events") }
