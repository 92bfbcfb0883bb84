// Package handlers is leasegate's HTTP layer: chi routes, thin handlers, JSON in and out, and the one
// mapping from errors to HTTP statuses (errors.go).
package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/handlers/ui"
	"github.com/leasegate/leasegate/lockcore"
)

// Locker is the lock engine the handlers drive; *lockcore.Service implements it.
type Locker interface {
	Acquire(ctx context.Context, req lockcore.AcquireRequest) (lockcore.Grant, error)
	Release(ctx context.Context, req lockcore.ReleaseRequest) (lockcore.Released, error)
	Renew(ctx context.Context, ref lockcore.Ref, token string, ttl time.Duration) (lockcore.Grant, error)
	Inspect(ctx context.Context, ref lockcore.Ref, token string) (lockcore.State, error)
	Ping(ctx context.Context) error
	AcquireAll(ctx context.Context, req lockcore.MultiRequest) (lockcore.MultiGrant, error)
	ReleaseAll(ctx context.Context, token, id string) (lockcore.MultiReleased, error)
	RenewAll(ctx context.Context, token, id string, ttl time.Duration) (lockcore.MultiGrant, error)
	ForceRelease(ctx context.Context, ref lockcore.Ref) (lockcore.ForceResult, error)
	Watch(ctx context.Context, ref lockcore.Ref, token string) (*lockcore.Stream, error)
}

// Options configure the router.
type Options struct {
	Limits api.Limits
	Logger *slog.Logger // default slog.Default()
	// AccessLog says which requests get an access log line (default AccessLogErrors).
	AccessLog AccessLog
	Spec      []byte // served at GET /openapi.yaml
	// Metrics, when set, counts every request and serves GET /metrics.
	Metrics Metrics
	// Admin, when set, serves the admin API (GET /locks, GET /semaphores, GET /admin/top, and
	// GET /elections with Elections);
	// LongHold is LEASEGATE_LONG_HOLD, which the top lists report.
	Admin    Admin
	LongHold time.Duration
	// Auth, when set, authenticates every route but /healthz, /readyz, /openapi.yaml and the
	// dashboard's files under /ui (and /metrics unless MetricsAuth), and authorizes each by the
	// principal's permissions and prefixes (see docs/auth.md). Nil: everything is open.
	Auth Authenticator
	// MetricsAuth protects GET /metrics: it then needs the admin permission on every name.
	MetricsAuth bool
	// Quotas limit each principal's requests on this replica (with Auth; see quota.go).
	Quotas Quotas
	// Streams bound the live event streams of this replica (see streams.go).
	Streams Streams
	// AuthFailures bound each client address's failed authentications (with Auth; see
	// auth_failures.go).
	AuthFailures AuthFailures
	// TrustedProxies are the peers whose X-Forwarded-For / Forwarded say who the client is, for
	// the failed-authentication throttle and the access log (see client_address.go).
	TrustedProxies TrustedProxies
	// Elections, when set, serves /elections (see elections.go); the lock engine renews and
	// force-releases their leases.
	Elections Elections
}

// Metrics is what the router needs of the gateway's metrics (*metrics.Metrics).
type Metrics interface {
	ObserveRequest(route, method string, status int, took time.Duration)
	Handler() http.Handler
}

// maxBodyBytes bounds every request body; larger ones get 413.
const maxBodyBytes = 64 << 10

// NewRouter returns the gateway's HTTP handler: every route of the API in one place.
func NewRouter(locker Locker, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	q := newQuotas(opts.Quotas)
	h := &lockHandlers{locker: locker, limits: opts.Limits, log: opts.Logger, quotas: q, streams: &streamGate{Streams: opts.Streams}}
	g := &guard{auth: opts.Auth, log: opts.Logger, quotas: q, failures: newFailedAuths(opts.AuthFailures), proxies: opts.TrustedProxies}
	const (
		lock, inspect, admin = auth.Lock, auth.Inspect, auth.Admin
	)

	r := chi.NewRouter()
	r.Use(recoverer(opts.Logger), limitHeaders(opts.Logger), singleHeaders(opts.Logger, leaseTokenHeader, idempotencyKeyHeader))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { writeError(w, r, h.log, errNotFound) })
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			if r.Match(chi.NewRouteContext(), m, req.URL.EscapedPath()) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, req, h.log, errMethodNotAllowed)
	})

	r.Get("/healthz", healthz)
	r.Get("/readyz", h.readyz)
	r.Get("/openapi.yaml", spec(opts.Spec))
	if opts.Metrics != nil {
		metrics := opts.Metrics.Handler().ServeHTTP
		if opts.MetricsAuth {
			metrics = g.need(admin, scopeAll, metrics)
		}
		r.Get("/metrics", metrics)
	}

	// Each route names the permission it needs and the names it touches (see guard.need; a
	// force release, ?force=true, needs admin). Without an Authenticator the guard wraps nothing.
	if opts.Admin != nil {
		a := &adminHandlers{admin: opts.Admin, longHold: opts.LongHold, log: opts.Logger}
		r.Get("/locks", g.need(admin, scopeListing, a.listLocks))
		r.Get("/semaphores", g.need(admin, scopeListing, a.listSemaphores))
		r.Get("/admin/top", g.need(admin, scopeAll, a.top))
		if opts.Elections != nil {
			r.Get("/elections", g.need(admin, scopeListing, a.listElections))
		}
		// GET /ui: the dashboard's page and /ui/{asset}, served to anyone: they hold no data (the
		// page asks for an API key and calls the admin API above with it).
		dashboard := ui.Handler().ServeHTTP
		r.Get("/ui", dashboard)
		r.Get("/ui/*", dashboard)
	}

	// Flat routes, not a mounted subrouter: one routing pass per request.
	r.Post("/locks/{name}", g.need(lock, scopeName, h.acquire))
	r.Delete("/locks/{name}", g.need(lock, scopeName, h.release)) // ?force=true: admin
	r.Get("/locks/{name}", g.need(inspect, scopeName, h.inspect))
	r.Post("/locks/{name}/renew", g.need(lock, scopeName, h.renew))
	r.Get("/locks/{name}/events", g.need(inspect, scopeName, h.events))
	r.Post("/semaphores/{name}", g.need(lock, scopeName, h.acquireSemaphore))
	r.Delete("/semaphores/{name}", g.need(lock, scopeName, h.releaseSemaphore)) // ?force=true: admin
	r.Get("/semaphores/{name}", g.need(inspect, scopeName, h.inspectSemaphore))
	r.Post("/semaphores/{name}/renew", g.need(lock, scopeName, h.renewSemaphore))
	r.Get("/semaphores/{name}/events", g.need(inspect, scopeName, h.semaphoreEvents))
	r.Post("/multilocks", g.need(lock, scopeMulti, h.acquireMulti))
	r.Delete("/multilocks", g.need(lock, scopeMulti, h.releaseMulti))
	r.Post("/multilocks/renew", g.need(lock, scopeMulti, h.renewMulti))
	r.Delete("/multilocks/{id}", g.need(lock, scopeMulti, h.releaseMulti))
	r.Post("/multilocks/{id}/renew", g.need(lock, scopeMulti, h.renewMulti))
	if opts.Elections != nil {
		e := &electionHandlers{lockHandlers: h, elections: opts.Elections}
		r.Post("/elections/{name}", g.need(lock, scopeName, e.campaign))
		r.Put("/elections/{name}", g.need(lock, scopeName, e.proclaim))
		r.Delete("/elections/{name}", g.need(lock, scopeName, e.resign)) // ?force=true: admin
		r.Get("/elections/{name}", g.need(inspect, scopeName, e.leader))
		r.Post("/elections/{name}/renew", g.need(lock, scopeName, e.renewElection))
		r.Get("/elections/{name}/events", g.need(inspect, scopeName, e.electionEvents))
	}
	return accessLog(opts.Logger, opts.AccessLog, opts.Metrics, opts.TrustedProxies, r)(r)
}
