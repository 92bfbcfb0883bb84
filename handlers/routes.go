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
}

// Options configure the router.
type Options struct {
	Limits api.Limits
	Logger *slog.Logger // default slog.Default()
	Spec   []byte       // served at GET /openapi.yaml
}

// maxBodyBytes bounds every request body; larger ones get 413.
const maxBodyBytes = 64 << 10

// NewRouter returns the gateway's HTTP handler: every route of the API in one place.
func NewRouter(locker Locker, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &lockHandlers{locker: locker, limits: opts.Limits, log: opts.Logger}

	r := chi.NewRouter()
	r.Use(accessLog(opts.Logger), recoverer(opts.Logger))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { writeError(w, r, h.log, errNotFound) })
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
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

	// Flat routes, not a mounted subrouter: one routing pass per request.
	r.Post("/locks/{name}", h.acquire)
	r.Delete("/locks/{name}", h.release)
	r.Get("/locks/{name}", h.inspect)
	r.Post("/locks/{name}/renew", h.renew)
	r.Post("/semaphores/{name}", h.acquireSemaphore)
	r.Delete("/semaphores/{name}", h.releaseSemaphore)
	r.Get("/semaphores/{name}", h.inspectSemaphore)
	r.Post("/semaphores/{name}/renew", h.renewSemaphore)
	r.Post("/multilocks", h.acquireMulti)
	r.Delete("/multilocks", h.releaseMulti)
	r.Post("/multilocks/renew", h.renewMulti)
	r.Delete("/multilocks/{id}", h.releaseMulti)
	r.Post("/multilocks/{id}/renew", h.renewMulti)
	return r
}
