package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/lockcore"
)

func TestWriteError(t *testing.T) {
	const secretText = "dial tcp 10.0.0.7:6379: password hunter2 rejected"
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		typ        string
		retryAfter string // "" means the header must be absent
		detail     string // "" means not checked beyond non-empty
		header     map[string]string
		check      func(t *testing.T, p api.Problem)
	}{
		{name: "request error", err: invalidRequest("request body has invalid fields",
			[]api.InvalidParam{{Name: "ttl_ms", Reason: "too big"}}),
			status: 400, typ: api.TypeInvalidRequest, detail: "request body has invalid fields",
			check: func(t *testing.T, p api.Problem) {
				assert.Equal(t, []api.InvalidParam{{Name: "ttl_ms", Reason: "too big"}}, p.InvalidParams)
			}},
		{name: "request error, invalid lock name", err: &requestError{http.StatusBadRequest, api.TypeInvalidLockName,
			"Invalid lock name", "bad name", nil}, status: 400, typ: api.TypeInvalidLockName, detail: "bad name"},
		{name: "request error, body too large", err: &requestError{http.StatusRequestEntityTooLarge, api.TypeBodyTooLarge,
			"Body too large", "too large", nil}, status: 413, typ: api.TypeBodyTooLarge},
		{name: "not found", err: errNotFound, status: 404, typ: api.TypeNotFound},
		{name: "method not allowed", err: errMethodNotAllowed, status: 405, typ: api.TypeMethodNotAllowed},
		{name: "wrapped request error", err: fmt.Errorf("decoding: %w", invalidRequest("bad", nil)),
			status: 400, typ: api.TypeInvalidRequest},
		{name: "held", err: &lockcore.HeldError{Lock: "x", RetryAfter: 1500 * time.Millisecond},
			status: 409, typ: api.TypeLockHeld, retryAfter: "2",
			check: func(t *testing.T, p api.Problem) {
				assert.Equal(t, "x", p.Lock)
				if assert.NotNil(t, p.RetryAfterms) {
					assert.Equal(t, int64(1500), *p.RetryAfterms)
				}
				assert.Nil(t, p.Waitedms, "no waited_ms for a try-once")
			}},
		{name: "held after a wait, with a queue ticket", err: &lockcore.HeldError{Lock: "x", RetryAfter: time.Second,
			Waited: 2 * time.Second, QueueTicket: "tk"}, status: 409, typ: api.TypeLockHeld, retryAfter: "1",
			check: func(t *testing.T, p api.Problem) { assert.Equal(t, "tk", p.QueueTicket) }},
		{name: "shutting down, with a queue ticket", err: &lockcore.ShutdownError{QueueTicket: "tk"},
			status: 503, typ: api.TypeShuttingDown, retryAfter: "1",
			check: func(t *testing.T, p api.Problem) { assert.Equal(t, "tk", p.QueueTicket) }},
		{name: "shutting down, wrapped", err: fmt.Errorf("joining: %w", lockcore.ErrShuttingDown),
			status: 503, typ: api.TypeShuttingDown, retryAfter: "1"},
		{name: "too many waiters", err: lockcore.ErrTooManyWaiters, status: 503, typ: api.TypeTooManyWaiters, retryAfter: "1"},
		{name: "invalid ticket", err: fmt.Errorf("%w: for lock y", lockcore.ErrInvalidTicket), status: 400, typ: api.TypeInvalidRequest,
			check: func(t *testing.T, p api.Problem) {
				if assert.Len(t, p.InvalidParams, 1) {
					assert.Equal(t, "queue_ticket", p.InvalidParams[0].Name)
				}
			}},
		{name: "held, 10 ms left", err: &lockcore.HeldError{Lock: "x", RetryAfter: 10 * time.Millisecond},
			status: 409, typ: api.TypeLockHeld, retryAfter: "1"},
		{name: "held, no time left", err: &lockcore.HeldError{Lock: "x"},
			status: 409, typ: api.TypeLockHeld, retryAfter: "1",
			check: func(t *testing.T, p api.Problem) {
				if assert.NotNil(t, p.RetryAfterms, "retry_after_ms is present even when 0") {
					assert.Equal(t, int64(0), *p.RetryAfterms)
				}
			}},
		{name: "held after waiting", err: fmt.Errorf("wait: %w",
			&lockcore.HeldError{Lock: "x", RetryAfter: 3 * time.Second, Waited: 2500 * time.Millisecond}),
			status: 409, typ: api.TypeLockHeld, retryAfter: "3",
			check: func(t *testing.T, p api.Problem) {
				if assert.NotNil(t, p.Waitedms) {
					assert.Equal(t, int64(2500), *p.Waitedms)
				}
			}},
		{name: "election led, after a wait", err: &lockcore.HeldError{Lock: "e", Kind: lockcore.KindElection, RetryAfter: time.Second,
			Waited: 2 * time.Second, QueueTicket: "tk"}, status: 409, typ: api.TypeElectionLed, retryAfter: "1",
			check: func(t *testing.T, p api.Problem) {
				assert.Equal(t, "e", p.Election)
				assert.Empty(t, p.Lock)
				assert.Equal(t, "tk", p.QueueTicket)
				if assert.NotNil(t, p.Waitedms) {
					assert.Equal(t, int64(2000), *p.Waitedms)
				}
			}},
		{name: "lease lost", err: fmt.Errorf("%w: x", lockcore.ErrLeaseLost), status: 410, typ: api.TypeLeaseGone},
		{name: "invalid token", err: lockcore.ErrInvalidToken, header: map[string]string{"Lease-Token": "x"},
			status: 400, typ: api.TypeInvalidLeaseToken, detail: "invalid lease token"},
		{name: "wrapped invalid token: the detail does not repeat the title",
			err: fmt.Errorf("%w: signature does not match", lockcore.ErrInvalidToken), header: map[string]string{"Lease-Token": "x"},
			status: 400, typ: api.TypeInvalidLeaseToken, detail: "signature does not match"},
		{name: "no Lease-Token header: the detail names it", err: fmt.Errorf("%w: missing", lockcore.ErrInvalidToken),
			status: 400, typ: api.TypeInvalidLeaseToken,
			detail: "this call needs the lease's token in the Lease-Token header, and the request has none",
			check: func(t *testing.T, p api.Problem) {
				if assert.Len(t, p.InvalidParams, 1) {
					assert.Equal(t, "Lease-Token", p.InvalidParams[0].Name)
				}
			}},
		{name: "a lease token sent as Authorization: Bearer", err: fmt.Errorf("%w: missing", lockcore.ErrInvalidToken),
			header: map[string]string{"Authorization": "Bearer eyJ2IjoxfQ.c2ln"}, status: 400, typ: api.TypeInvalidLeaseToken,
			check: func(t *testing.T, p api.Problem) {
				assert.Contains(t, p.Detail, "Lease-Token header")
				assert.Contains(t, p.Detail, "Authorization: Bearer header carries an API key or JWT")
			}},
		{name: "unauthenticated: the detail does not repeat the title",
			err:    fmt.Errorf("%w: send Authorization: Bearer <API key or JWT>", auth.ErrUnauthenticated),
			status: 401, typ: api.TypeUnauthenticated, detail: "send Authorization: Bearer <API key or JWT>"},
		{name: "invalid", err: lockcore.ErrInvalid, status: 400, typ: api.TypeInvalidRequest},
		{name: "wrapped invalid: the detail does not repeat the title", err: fmt.Errorf("%w: cursor \"c\" is not one a listing returned", lockcore.ErrInvalid),
			status: 400, typ: api.TypeInvalidRequest, detail: `cursor "c" is not one a listing returned`},
		{name: "unavailable", err: fmt.Errorf("%w: %s", lockcore.ErrUnavailable, secretText),
			status: 503, typ: api.TypeBackendUnavailable, retryAfter: "1", detail: "redis is unavailable; retry later"},
		{name: "not supported", err: fmt.Errorf("%w: semaphores on RedLock", lockcore.ErrNotSupported), status: 501, typ: api.TypeNotSupported},
		{name: "bare unavailable", err: lockcore.ErrUnavailable, status: 503, typ: api.TypeBackendUnavailable, retryAfter: "1"},
		{name: "unknown error", err: errors.New(secretText), status: 500, typ: api.TypeInternal, detail: "internal error"},
		{name: "panic", err: errPanic, status: 500, typ: api.TypeInternal, detail: "internal error"},
		{name: "canceled while the request is still live", err: context.Canceled, status: 500, typ: api.TypeInternal,
			detail: "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			r := httptest.NewRequest(http.MethodPost, "/locks/x", nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			r = r.WithContext(context.WithValue(r.Context(), requestKey{}, &requestInfo{rec: statusRecorder{id: "req-42"}}))
			w := httptest.NewRecorder()

			writeError(w, r, log, tc.err)

			assert.Equal(t, tc.status, w.Code)
			assert.Equal(t, api.ContentTypeProblem, w.Header().Get("Content-Type"))
			assert.Equal(t, tc.retryAfter, w.Header().Get("Retry-After"))
			var p api.Problem
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&p), "a problem body")
			assert.Equal(t, tc.typ, p.Type)
			assert.Equal(t, tc.status, p.Status)
			assert.NotEmpty(t, p.Title)
			assert.NotEmpty(t, p.Detail)
			assert.Equal(t, "req-42", p.RequestID)
			if tc.detail != "" {
				assert.Equal(t, tc.detail, p.Detail)
			}
			if tc.status >= 500 {
				assert.NotContains(t, p.Detail, "hunter2", "a server error never leaks its cause")
				assert.Contains(t, logs.String(), "req-42", "a server error is logged with the request ID")
			}
			if tc.status == 500 {
				assert.Contains(t, logs.String(), tc.err.Error(), "an internal error is logged in full")
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

// TestWriteErrorClientGone: when the client went away, nothing is written and the access log
// records 499.
func TestWriteErrorClientGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	info := &requestInfo{rec: statusRecorder{ResponseWriter: httptest.NewRecorder()}}
	rec := &info.rec
	ctx = context.WithValue(ctx, requestKey{}, info)
	r := httptest.NewRequest(http.MethodPost, "/locks/x", nil).WithContext(ctx)
	w := rec.ResponseWriter.(*httptest.ResponseRecorder)

	writeError(rec, r, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), fmt.Errorf("acquire: %w", context.Canceled))

	assert.Empty(t, w.Header(), "no headers written")
	assert.Zero(t, w.Body.Len(), "no body written")
	assert.Equal(t, statusClientClosed, rec.status)
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "1"},
		{0, "1"},
		{time.Nanosecond, "1"},
		{10 * time.Millisecond, "1"},
		{999 * time.Millisecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Nanosecond, "2"},
		{1500 * time.Millisecond, "2"},
		{2 * time.Second, "2"},
		{59*time.Second + time.Millisecond, "60"},
		{time.Hour, "3600"},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			assert.Equal(t, tc.want, retryAfterSeconds(tc.d))
		})
	}
}
