package handlers

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/api"
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

// firstTryLocker is a Locker whose StartAcquire grants only when the test says so, on the
// caller's goroutine (as lockcore's first try does), and which records releases.
type firstTryLocker struct {
	Locker
	entered  chan struct{}
	proceed  chan struct{}
	released chan string
}

func (l *firstTryLocker) StartAcquire(req lockcore.AcquireRequest, done func(lockcore.Grant, error)) func(error) {
	close(l.entered)
	<-l.proceed
	done(lockcore.Grant{Lease: lockcore.Lease{Lock: req.Lock, Owner: req.Owner, ID: "id", Fence: 1}, Token: "tok",
		TTL: req.TTL, ExpiresAt: time.Now().Add(req.TTL), Holds: 1}, nil)
	return func(error) {}
}

func (l *firstTryLocker) Release(_ context.Context, lock, token string) (lockcore.Released, error) {
	l.released <- lock + " " + token
	return lockcore.Released{Released: true}, nil
}

// TestLongPollGrantedAfterItsClientLeftIsReleased: a long-poll whose client disconnects while
// its first try is in Redis, and which that try then grants, gives the grant back at once.
func TestLongPollGrantedAfterItsClientLeftIsReleased(t *testing.T) {
	locker := &firstTryLocker{entered: make(chan struct{}), proceed: make(chan struct{}), released: make(chan string, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	parking := NewParking(ln.Addr(), time.Minute)
	router := NewRouter(locker, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Parking: parking,
		Limits: api.Limits{DefaultTTL: time.Second, MaxTTL: time.Minute, MaxWait: time.Minute, MaxHold: time.Minute}})
	clientGone := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		context.AfterFunc(r.Context(), func() { close(clientGone) })
		router.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	go func() { _ = srv.Serve(parking) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/locks/abandoned",
		strings.NewReader(`{"owner":"o","wait_ms":5000}`))
	require.NoError(t, err)
	failed := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	<-locker.entered
	cancel()
	require.Error(t, <-failed, "the client gave up")
	<-clientGone // the server noticed
	close(locker.proceed)
	select {
	case got := <-locker.released:
		assert.Equal(t, "abandoned tok", got)
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned grant was not released")
	}
}

// TestParkedAnswerToHTTP10KeepAlive: an HTTP/1.0 client that asked for keep-alive is told the
// connection stays open, as net/http tells it.
func TestParkedAnswerToHTTP10KeepAlive(t *testing.T) {
	resp := &rawResponse{header: http.Header{}, http10: true}
	writeJSON(resp, http.StatusOK, map[string]int{"a": 1})
	assert.Contains(t, string(resp.render(false)), "\r\nConnection: keep-alive\r\n")
	assert.Contains(t, string(resp.render(true)), "\r\nConnection: close\r\n")
}
