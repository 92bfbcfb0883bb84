package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/lockcore"
)

// requestError is a request the handlers rejected before calling lockcore.
type requestError struct {
	status int
	typ    string
	title  string
	detail string
	params []api.InvalidParam
}

func (e *requestError) Error() string { return e.detail }

var (
	errNotFound         = &requestError{http.StatusNotFound, api.TypeNotFound, "Not found", "no such route", nil}
	errMethodNotAllowed = &requestError{http.StatusMethodNotAllowed, api.TypeMethodNotAllowed, "Method not allowed", "this route does not accept that method", nil}
	errHeadersTooLarge  = &requestError{http.StatusRequestHeaderFieldsTooLarge, api.TypeHeadersTooLarge, "Request headers too large",
		fmt.Sprintf("the request line and headers take more than %d KiB", MaxHeaderBytes>>10), nil}
)

func invalidRequest(detail string, params []api.InvalidParam) error {
	return &requestError{http.StatusBadRequest, api.TypeInvalidRequest, "Invalid request", detail, params}
}

// statusClientClosed is logged (never sent) when the client went away before the answer.
const statusClientClosed = 499

// writeError is the one place that maps errors to HTTP statuses and problem types.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if errors.Is(err, lockcore.ErrInvalidToken) && r.Header.Get(leaseTokenHeader) == "" {
		err = missingToken(r)
	}
	writeProblem(r.Context(), w, log, err)
}

// missingToken is the 400 of a call that needs a lease token and got no Lease-Token header,
// saying where the token goes: a lease token sent as "Authorization: Bearer" is a common slip.
func missingToken(r *http.Request) error {
	detail := "this call needs the lease's token in the Lease-Token header, and the request has none"
	if scheme, _, _ := strings.Cut(r.Header.Get(authorizationHeader), " "); strings.EqualFold(scheme, "Bearer") {
		detail += "; the Authorization: Bearer header carries an API key or JWT (for a gateway with an auth file), never a lease token"
	}
	return &requestError{http.StatusBadRequest, api.TypeInvalidLeaseToken, "Invalid lease token", detail,
		[]api.InvalidParam{{Name: leaseTokenHeader, Reason: "missing: send the token of the grant as Lease-Token: <token>"}}}
}

// after is err's message without the leading "sentinel: ", which the problem's title already
// says ("401 Unauthenticated: unauthenticated: ..." would stutter).
func after(err, sentinel error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, sentinel.Error()+": "); ok {
		return rest
	}
	return msg
}

// writeProblem is writeError for a request known by its context: ctx carries the request ID, and
// ends when the client went away.
func writeProblem(ctx context.Context, w http.ResponseWriter, log *slog.Logger, err error) {
	p := api.Problem{Detail: err.Error(), RequestID: requestIDFrom(ctx)}
	var (
		reqErr      *requestError
		heldErr     *lockcore.HeldError
		shutdownErr *lockcore.ShutdownError
		sizeErr     *lockcore.PermitsMismatchError
		lostErr     *lockcore.GroupLostError
		goneErr     *lockcore.LeaseLostError
		deniedErr   *auth.ForbiddenError
		quotaErr    *quotaError
		heldQuota   *lockcore.QuotaExceededError
		streamsErr  *tooManyStreamsError
		throttled   *authThrottledError
	)
	switch {
	case errors.As(err, &reqErr):
		p.Status, p.Type, p.Title, p.InvalidParams = reqErr.status, reqErr.typ, reqErr.title, reqErr.params
	case errors.Is(err, auth.ErrUnauthenticated):
		p.Status, p.Type, p.Title = http.StatusUnauthorized, api.TypeUnauthenticated, "Unauthenticated"
		p.Detail = after(err, auth.ErrUnauthenticated)
		w.Header().Set("WWW-Authenticate", `Bearer realm="leasegate"`)
	case errors.As(err, &throttled):
		p.Status, p.Type, p.Title = http.StatusTooManyRequests, api.TypeAuthenticationThrottled, "Authentication throttled"
		p.RetryAfterms = ptr(throttled.retryAfter.Milliseconds())
		w.Header().Set("Retry-After", retryAfterSeconds(throttled.retryAfter))
	case errors.As(err, &quotaErr):
		p.Status, p.Type, p.Title = http.StatusTooManyRequests, api.TypeQuotaExceeded, "Quota exceeded"
		p.RetryAfterms = ptr(quotaErr.retryAfter.Milliseconds())
		w.Header().Set("Retry-After", retryAfterSeconds(quotaErr.retryAfter))
	case errors.As(err, &heldQuota):
		p.Status, p.Type, p.Title = http.StatusTooManyRequests, api.TypeQuotaExceeded, "Quota exceeded"
		p.RetryAfterms = ptr(heldQuota.RetryAfter.Milliseconds())
		w.Header().Set("Retry-After", retryAfterSeconds(heldQuota.RetryAfter))
	case errors.As(err, &deniedErr):
		p.Status, p.Type, p.Title = http.StatusForbidden, api.TypeForbidden, "Forbidden"
		p.Permission, p.Name = string(deniedErr.Permission), deniedErr.Name
	case errors.As(err, &heldErr) && heldErr.Kind == lockcore.KindSemaphore:
		p.Status, p.Type, p.Title, p.Semaphore = http.StatusConflict, api.TypeSemaphoreFull, "No permit free", heldErr.Lock
		p.RetryAfterms = ptr(heldErr.RetryAfter.Milliseconds())
		if heldErr.Waited > 0 {
			p.Waitedms = ptr(heldErr.Waited.Milliseconds())
		}
		p.QueueTicket = heldErr.QueueTicket
		w.Header().Set("Retry-After", retryAfterSeconds(heldErr.RetryAfter))
	case errors.As(err, &heldErr) && heldErr.Kind == lockcore.KindElection:
		p.Status, p.Type, p.Title, p.Election = http.StatusConflict, api.TypeElectionLed, "Another candidate leads", heldErr.Lock
		p.RetryAfterms = ptr(heldErr.RetryAfter.Milliseconds())
		if heldErr.Waited > 0 {
			p.Waitedms = ptr(heldErr.Waited.Milliseconds())
		}
		p.QueueTicket = heldErr.QueueTicket
		w.Header().Set("Retry-After", retryAfterSeconds(heldErr.RetryAfter))
	case errors.As(err, &heldErr):
		p.Status, p.Type, p.Title, p.Lock, p.Locks = http.StatusConflict, api.TypeLockHeld, "Lock held", heldErr.Lock, heldErr.Locks
		p.RetryAfterms = ptr(heldErr.RetryAfter.Milliseconds())
		if heldErr.Waited > 0 {
			p.Waitedms = ptr(heldErr.Waited.Milliseconds())
		}
		p.QueueTicket = heldErr.QueueTicket
		w.Header().Set("Retry-After", retryAfterSeconds(heldErr.RetryAfter))
	case errors.Is(err, lockcore.ErrUpgradeRefused):
		p.Status, p.Type, p.Title = http.StatusConflict, api.TypeUpgradeRefused, "Upgrade refused"
		p.Detail = err.Error() + ": upgrades deadlock (two shared holders each waiting for the other to leave); " +
			"release the shared hold, then acquire exclusively"
		w.Header().Set("Retry-After", "1")
	case errors.As(err, &sizeErr):
		p.Status, p.Type, p.Title, p.Semaphore = http.StatusConflict, api.TypePermitsMismatch, "Permits mismatch", sizeErr.Semaphore
		p.Permits = ptr(sizeErr.Permits)
		w.Header().Set("Retry-After", "1")
	case errors.As(err, &lostErr):
		p.Status, p.Type, p.Title, p.Locks = http.StatusGone, api.TypeLeaseGone, "Lease gone", lostErr.Locks
	case errors.Is(err, lockcore.ErrLeaseLost):
		p.Status, p.Type, p.Title = http.StatusGone, api.TypeLeaseGone, "Lease gone"
		if errors.As(err, &goneErr) && goneErr.Forced {
			p.ForcedAt = goneErr.ForcedAt.UTC().Format("2006-01-02T15:04:05.000Z")
		}
	case errors.Is(err, lockcore.ErrIdempotencyKeyReused):
		p.Status, p.Type, p.Title = http.StatusUnprocessableEntity, api.TypeIdempotencyKeyReused, "Idempotency-Key reused"
	case errors.Is(err, lockcore.ErrInvalidToken):
		p.Status, p.Type, p.Title = http.StatusBadRequest, api.TypeInvalidLeaseToken, "Invalid lease token"
		p.Detail = after(err, lockcore.ErrInvalidToken)
	case errors.Is(err, lockcore.ErrInvalidTicket):
		p.Status, p.Type, p.Title = http.StatusBadRequest, api.TypeInvalidRequest, "Invalid request"
		p.InvalidParams = []api.InvalidParam{{Name: "queue_ticket", Reason: err.Error()}}
	case errors.Is(err, lockcore.ErrInvalid):
		p.Status, p.Type, p.Title = http.StatusBadRequest, api.TypeInvalidRequest, "Invalid request"
		p.Detail = after(err, lockcore.ErrInvalid)
	case errors.As(err, &shutdownErr), errors.Is(err, lockcore.ErrShuttingDown):
		p.Status, p.Type, p.Title = http.StatusServiceUnavailable, api.TypeShuttingDown, "Shutting down"
		p.Detail = "this gateway replica is shutting down; retry on another"
		if shutdownErr != nil {
			p.QueueTicket = shutdownErr.QueueTicket
		}
		w.Header().Set("Retry-After", "1")
		log.Info("request ended by shutdown", "request_id", p.RequestID)
	case errors.Is(err, lockcore.ErrTooManyWaiters):
		p.Status, p.Type, p.Title = http.StatusServiceUnavailable, api.TypeTooManyWaiters, "Too many waiting requests"
		w.Header().Set("Retry-After", "1")
		log.Warn("waiting request refused: too many waiting requests", "request_id", p.RequestID)
	case errors.As(err, &streamsErr):
		p.Status, p.Type, p.Title = http.StatusServiceUnavailable, api.TypeTooManyStreams, "Too many event streams"
		w.Header().Set("Retry-After", "1")
		log.Warn("event stream refused: too many event streams", "request_id", p.RequestID)
	case errors.Is(err, lockcore.ErrNotSupported):
		p.Status, p.Type, p.Title = http.StatusNotImplemented, api.TypeNotSupported, "Not supported"
		log.Info("operation not supported on this deployment", "request_id", p.RequestID, "err", err)
	case errors.Is(err, lockcore.ErrUnavailable):
		p.Status, p.Type, p.Title = http.StatusServiceUnavailable, api.TypeBackendUnavailable, "Backend unavailable"
		p.Detail = "redis is unavailable; retry later"
		w.Header().Set("Retry-After", "1")
		log.Warn("redis unavailable", "request_id", p.RequestID, "err", err)
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		setStatus(ctx, statusClientClosed, false)
		return
	default:
		p.Status, p.Type, p.Title, p.Detail = http.StatusInternalServerError, api.TypeInternal, "Internal error", "internal error"
		log.Error("internal error", "request_id", p.RequestID, "err", err)
	}
	w.Header().Set("Content-Type", api.ContentTypeProblem)
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// retryAfterSeconds renders d as a Retry-After value: whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}

func ptr[T any](v T) *T { return &v }

// errPanic stands for a recovered panic; it maps to 500 like any unknown error.
var errPanic = errors.New("panic")
