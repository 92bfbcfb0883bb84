package handlers

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
)

// TestAccessLogSendsTheRequestIDWithEveryAnswer: the request ID goes out with the answer's header
// however the handler answers (it is set as the header goes out, not as the request comes in):
// by writing, by a status alone, by a flush before anything else, or by writing nothing at all.
func TestAccessLogSendsTheRequestIDWithEveryAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		status  int
	}{
		{"write", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }, http.StatusOK},
		{"status", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusConflict) }, http.StatusConflict},
		{"flush first", func(w http.ResponseWriter, _ *http.Request) {
			_ = http.NewResponseController(w).Flush()
			_, _ = io.WriteString(w, "streamed")
		}, http.StatusOK},
		{"nothing", func(http.ResponseWriter, *http.Request) {}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := chi.NewRouter()
			r.Get("/x", tc.handler)
			srv := httptest.NewServer(accessLog(slog.New(slog.DiscardHandler), AccessLogOff, nil, nil, r)(r))
			defer srv.Close()

			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
			req.Header.Set(requestIDHeader, "client-id-1")
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, []string{"client-id-1"}, resp.Header.Values(requestIDHeader), "the client's ID, once")

			resp2, err := http.Get(srv.URL + "/x")
			if !assert.NoError(t, err) {
				return
			}
			defer resp2.Body.Close()
			assert.Len(t, resp2.Header.Values(requestIDHeader), 1, "an ID of ours, once")
			assert.NotEmpty(t, resp2.Header.Get(requestIDHeader))
		})
	}
}
