package handlers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
	"github.com/leasegate/leasegate/metrics"
)

// instantLocker answers at once, minting and parsing real tokens, so that the benchmark measures
// the HTTP layer's own work per request (routing, middleware, JSON, tokens) without Redis.
type instantLocker struct{ tokens *lockcore.Tokens }

func (l instantLocker) Acquire(_ context.Context, req lockcore.AcquireRequest) (lockcore.Grant, error) {
	lease := lockcore.Lease{Lock: req.Lock, Owner: req.Owner, ID: uuid.NewString(), Fence: 1}
	return lockcore.Grant{Lease: lease, Token: l.tokens.Mint(lease), TTL: req.TTL, ExpiresAt: time.Now().Add(req.TTL), Holds: 1}, nil
}

func (l instantLocker) Release(_ context.Context, req lockcore.ReleaseRequest) (lockcore.Released, error) {
	_, err := l.tokens.Parse(req.Token, req.Ref)
	return lockcore.Released{Released: true}, err
}

func (instantLocker) Renew(context.Context, lockcore.Ref, string, time.Duration) (lockcore.Grant, error) {
	return lockcore.Grant{}, nil
}

func (instantLocker) Inspect(context.Context, lockcore.Ref, string) (lockcore.State, error) {
	return lockcore.State{}, nil
}

func (instantLocker) Ping(context.Context) error { return nil }

func (instantLocker) AcquireAll(context.Context, lockcore.MultiRequest) (lockcore.MultiGrant, error) {
	return lockcore.MultiGrant{}, errors.ErrUnsupported
}
func (instantLocker) ReleaseAll(context.Context, string, string) (lockcore.MultiReleased, error) {
	return lockcore.MultiReleased{}, errors.ErrUnsupported
}
func (instantLocker) RenewAll(context.Context, string, string, time.Duration) (lockcore.MultiGrant, error) {
	return lockcore.MultiGrant{}, errors.ErrUnsupported
}
func (instantLocker) ForceRelease(context.Context, lockcore.Ref) (lockcore.ForceResult, error) {
	return lockcore.ForceResult{}, nil
}
func (instantLocker) Watch(context.Context, lockcore.Ref, string) (*lockcore.Stream, error) {
	return nil, errors.ErrUnsupported
}

// BenchmarkAcquireReleaseCycle is one uncontended acquire and release through the router, as a
// client's cycle runs them: with the default access log (errors only) and with every request
// logged (into io.Discard), with and without metrics. The lock engine's own metric calls (two per
// cycle) are not in it.
func BenchmarkAcquireReleaseCycle(b *testing.B) {
	tokens, _ := lockcore.NewTokens([]byte("bench-secret-bench-secret-bench-secret"))
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	limits := api.Limits{DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute, MaxHold: time.Hour}
	for _, c := range []struct {
		name    string
		log     AccessLog
		metrics Metrics
	}{
		{"default", AccessLogErrors, nil},
		{"metrics", AccessLogErrors, metrics.New(time.Minute)},
		{"access log all", AccessLogAll, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := NewRouter(instantLocker{tokens}, Options{Logger: log, AccessLog: c.log, Metrics: c.metrics, Limits: limits})
			b.ReportAllocs()
			for b.Loop() {
				cycle(b, h)
			}
		})
	}
}

func cycle(b testing.TB, h http.Handler) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/locks/bench", strings.NewReader(`{"owner":"bench","ttl_ms":30000}`)))
	if w.Code != http.StatusCreated {
		b.Fatal(w.Code, w.Body.String())
	}
	token := w.Body.String()
	token = token[strings.Index(token, `"token":"`)+9:]
	token = token[:strings.IndexByte(token, '"')]
	req := httptest.NewRequest(http.MethodDelete, "/locks/bench", nil)
	req.Header.Set("Lease-Token", token)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatal(w.Code, w.Body.String())
	}
}

// BenchmarkCheckFieldNames is the strict field-name check of an acquire body (see decodeBody).
func BenchmarkCheckFieldNames(b *testing.B) {
	body := []byte(`{"owner":"bench","ttl_ms":30000}`)
	fields := jsonFields(reflect.TypeFor[*api.AcquireRequest]())
	b.ReportAllocs()
	for b.Loop() {
		if err := checkFieldNames(body, fields); err != nil {
			b.Fatal(err)
		}
	}
}
