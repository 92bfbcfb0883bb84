package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// leaseTokenHeader carries a lease token on re-entry, release, renew and inspect.
const leaseTokenHeader = "Lease-Token"

// idempotencyKeyHeader makes a retried acquire, release or renew answer as the first try did.
const idempotencyKeyHeader = "Idempotency-Key"

// idempotencyKey returns the request's Idempotency-Key ("" when absent): 1-255 visible ASCII
// characters, so that it can be part of a Redis key name and never forges a log line.
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get(idempotencyKeyHeader)
	if key == "" {
		return "", nil
	}
	if len(key) > 255 || strings.IndexFunc(key, func(c rune) bool { return c <= ' ' || c > '~' }) >= 0 {
		return "", invalidRequest("the Idempotency-Key header is not valid",
			[]api.InvalidParam{{Name: idempotencyKeyHeader, Reason: "must be 1-255 visible ASCII characters (a UUID is a good choice)"}})
	}
	return key, nil
}

type lockHandlers struct {
	locker Locker
	limits api.Limits
	log    *slog.Logger
}

// acquire handles POST /locks/{name}: 201 for a new grant, 200 for a re-entry.
func (h *lockHandlers) acquire(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	var body api.AcquireRequest
	if err := decodeBody(w, r, &body, false); err != nil {
		writeError(w, r, h.log, err)
		return
	}
	req, bad := body.Validate(h.limits)
	if bad != nil {
		writeError(w, r, h.log, invalidRequest("request body has invalid fields", bad))
		return
	}
	// A waiting request runs on this goroutine until it is granted, its wait runs out, or its
	// client leaves (which ends r.Context()).
	g, err := h.locker.Acquire(r.Context(), lockcore.AcquireRequest{
		Lock: name, Owner: req.Owner, TTL: req.TTL, Wait: req.Wait, Watchdog: req.Watchdog, MaxHold: req.MaxHold,
		Token: r.Header.Get(leaseTokenHeader), QueueTicket: req.QueueTicket, IdempotencyKey: idem,
	})
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	status := http.StatusCreated
	if g.Reentered {
		status = http.StatusOK
	} else {
		w.Header().Set("Location", "/locks/"+name)
	}
	writeJSON(w, status, grantBody(g))
	// A grant whose answer cannot reach its client would stay held for its whole TTL (or max hold,
	// with the watchdog): push the answer out now, and give the hold back if it did not go. With an
	// Idempotency-Key the client retries, and its retry collects the grant instead.
	if err := http.NewResponseController(w).Flush(); err != nil && idem != "" {
		h.log.Info("grant not delivered: client gone; kept for the retry with its Idempotency-Key", "request_id", requestIDFrom(r.Context()), "lock", name, "err", err)
		setStatus(r.Context(), statusClientClosed, true)
	} else if err != nil {
		if _, rerr := h.locker.Release(context.WithoutCancel(r.Context()), name, g.Token, ""); rerr != nil {
			h.log.Warn("giving back a grant whose answer was not delivered failed", "request_id", requestIDFrom(r.Context()), "lock", name, "err", rerr)
		}
		h.log.Info("grant not delivered: client gone; hold given back", "request_id", requestIDFrom(r.Context()), "lock", name, "err", err)
		setStatus(r.Context(), statusClientClosed, true)
	}
}

// release handles DELETE /locks/{name}.
func (h *lockHandlers) release(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	rel, err := h.locker.Release(r.Context(), name, r.Header.Get(leaseTokenHeader), idem)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Release{Lock: name, Released: rel.Released, Holds: rel.Holds})
}

// renew handles POST /locks/{name}/renew.
func (h *lockHandlers) renew(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	if _, err := idempotencyKey(r); err != nil { // validated, though a renewal needs no latch
		writeError(w, r, h.log, err)
		return
	}
	var body api.RenewRequest
	if err := decodeBody(w, r, &body, true); err != nil {
		writeError(w, r, h.log, err)
		return
	}
	ttl, bad := body.Validate(h.limits)
	if bad != nil {
		writeError(w, r, h.log, invalidRequest("request body has invalid fields", bad))
		return
	}
	g, err := h.locker.Renew(r.Context(), name, r.Header.Get(leaseTokenHeader), ttl)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, grantBody(g))
}

// inspect handles GET /locks/{name}.
func (h *lockHandlers) inspect(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	st, err := h.locker.Inspect(r.Context(), name, r.Header.Get(leaseTokenHeader))
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	body := api.LockState{Lock: name, Held: st.Held, Waiters: st.Waiters, Yours: st.Yours}
	if st.Held {
		body.Owner, body.Fence, body.Holds = st.Owner, st.Fence, st.Holds
		body.TTLms, body.Watchdog = ptr(st.TTL.Milliseconds()), ptr(st.Watchdog)
		if st.Watchdog {
			body.MaxHoldms = ptr(st.HoldLeft.Milliseconds())
		}
	}
	writeJSON(w, http.StatusOK, body)
}

func grantBody(g lockcore.Grant) api.Grant {
	return api.Grant{
		Lock: g.Lock, Owner: g.Owner, Token: g.Token, Fence: g.Fence, TTLms: g.TTL.Milliseconds(),
		ExpiresAt: api.Timestamp(g.ExpiresAt), Holds: g.Holds, Watchdog: g.Watchdog,
	}
}
