package handlers

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/lockcore"
)

// TestParkedAnswersAreWellFormedHTTP renders parked answers (a grant and a problem, with and
// without "Connection: close") and reads them back with net/http's own response parser.
func TestParkedAnswersAreWellFormedHTTP(t *testing.T) {
	h := &lockHandlers{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.WithValue(context.Background(), requestIDKey, "req-1")
	grant := lockcore.Grant{Lease: lockcore.Lease{Lock: "orders", Owner: "w", ID: "id", Fence: 7}, Token: "tok",
		TTL: time.Second, ExpiresAt: time.Now().Add(time.Second), Holds: 1}
	for _, tc := range []struct {
		name    string
		err     error
		closing bool
		status  int
		ctype   string
	}{
		{"grant", nil, false, http.StatusCreated, "application/json"},
		{"grant, closing", nil, true, http.StatusCreated, "application/json"},
		{"timeout", &lockcore.HeldError{Lock: "orders", RetryAfter: 1500 * time.Millisecond, Waited: time.Second}, false,
			http.StatusConflict, "application/problem+json"},
		{"shutting down", lockcore.ErrUnavailable, true, http.StatusServiceUnavailable, "application/problem+json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &rawResponse{header: http.Header{requestIDHeader: {"req-1"}}}
			h.writeAcquire(ctx, resp, "orders", grant, tc.err)
			raw := resp.render(tc.closing)

			got, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
			require.NoError(t, err)
			body, err := io.ReadAll(got.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.status, got.StatusCode)
			assert.Equal(t, tc.ctype, got.Header.Get("Content-Type"))
			assert.Equal(t, "req-1", got.Header.Get(requestIDHeader))
			assert.NotEmpty(t, got.Header.Get("Date"))
			assert.EqualValues(t, len(body), got.ContentLength)
			assert.Equal(t, tc.closing, got.Close, "Connection: close")
			if tc.err == nil {
				assert.Equal(t, "/locks/orders", got.Header.Get("Location"))
				assert.Contains(t, string(body), `"fence":7`)
			} else {
				assert.Contains(t, string(body), `"request_id":"req-1"`)
			}
			if tc.status == http.StatusConflict {
				assert.Equal(t, "2", got.Header.Get("Retry-After"))
			}
		})
	}
}
