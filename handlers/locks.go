package handlers

import (
	"log/slog"
	"net/http"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// leaseTokenHeader carries a lease token on re-entry, release, renew and inspect.
const leaseTokenHeader = "Lease-Token"

type lockHandlers struct {
	locker  Locker
	limits  api.Limits
	log     *slog.Logger
	parking *Parking // nil: long-polls wait on their server goroutine
}

// acquire handles POST /locks/{name}: 201 for a new grant, 200 for a re-entry.
func (h *lockHandlers) acquire(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
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
	lreq := lockcore.AcquireRequest{
		Lock: name, Owner: req.Owner, TTL: req.TTL, Wait: req.Wait, Watchdog: req.Watchdog, MaxHold: req.MaxHold,
		Token: r.Header.Get(leaseTokenHeader),
	}
	if lreq.Wait > 0 && lreq.Token == "" && h.parking != nil {
		h.acquireLongPoll(w, r, name, lreq)
		return
	}
	g, err := h.locker.Acquire(r.Context(), lreq)
	h.writeAcquire(r.Context(), w, name, g, err)
}

// release handles DELETE /locks/{name}.
func (h *lockHandlers) release(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	rel, err := h.locker.Release(r.Context(), name, r.Header.Get(leaseTokenHeader))
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
