package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/lockcore"
)

// Multi-locks: /multilocks takes several locks all or nothing under one token; /multilocks/{id}
// (the grant's Location) and /multilocks name the same group for release and renew, its token
// saying which.

// acquireMulti handles POST /multilocks: 201 with every member, or a problem and none.
func (h *lockHandlers) acquireMulti(w http.ResponseWriter, r *http.Request) {
	if err := noIdempotencyKey(r); err != nil {
		writeError(w, r, h.log, err)
		return
	}
	req, err := readBody[api.MultiLock, api.MultiLockRequest](w, r, h.limits, false)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	p := principalFrom(r.Context())
	if p != nil {
		if err := p.Authorize(auth.Lock, req.Locks...); err != nil { // every member, before lockcore
			writeError(w, r, h.log, err)
			return
		}
	}
	// One request of the rate quota per member: the guard took the first.
	if err := h.quotas.allowN(p, len(req.Locks)-1); err != nil {
		writeError(w, r, h.log, err)
		return
	}
	if req.Wait > 0 {
		done, err := h.quotas.admitWait(p)
		if err != nil {
			writeError(w, r, h.log, err)
			return
		}
		defer done()
	}
	mode := lockcore.Exclusive
	if req.Shared {
		mode = lockcore.Shared
	}
	g, err := h.locker.AcquireAll(r.Context(), lockcore.MultiRequest{Locks: req.Locks, Mode: mode, Owner: req.Owner,
		TTL: req.TTL, Wait: req.Wait, Watchdog: req.Watchdog, MaxHold: req.MaxHold, Principal: principalName(r.Context()),
		HeldCap: heldCap(p), QueueTicket: req.QueueTicket})
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	w.Header().Set("Location", "/multilocks/"+g.ID)
	writeJSON(w, http.StatusCreated, multiGrantBody(g))
	// As for a single grant (see grant): a group whose answer cannot reach its client is given back.
	if err := http.NewResponseController(w).Flush(); err != nil {
		if _, rerr := h.locker.ReleaseAll(context.WithoutCancel(r.Context()), g.Token, g.ID); rerr != nil {
			h.log.Warn("giving back a multi-lock whose answer was not delivered failed", "request_id", requestIDFrom(r.Context()), "multilock", g.ID, "err", rerr)
		}
		h.log.Info("multi-lock not delivered: client gone; given back", "request_id", requestIDFrom(r.Context()), "multilock", g.ID, "err", err)
		setStatus(r.Context(), statusClientClosed, true)
	}
}

// releaseMulti handles DELETE /multilocks and /multilocks/{id}.
func (h *lockHandlers) releaseMulti(w http.ResponseWriter, r *http.Request) {
	id, err := multiLockID(r)
	if err == nil {
		err = noIdempotencyKey(r)
	}
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	rel, err := h.locker.ReleaseAll(r.Context(), r.Header.Get(leaseTokenHeader), id)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, api.MultiLockRelease{ID: rel.ID, Released: true, Locks: rel.Locks})
}

// renewMulti handles POST /multilocks/renew and /multilocks/{id}/renew.
func (h *lockHandlers) renewMulti(w http.ResponseWriter, r *http.Request) {
	id, err := multiLockID(r)
	if err == nil {
		err = noIdempotencyKey(r)
	}
	var ttl time.Duration
	if err == nil {
		ttl, err = readBody[time.Duration, api.RenewRequest](w, r, h.limits, true)
	}
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	g, err := h.locker.RenewAll(r.Context(), r.Header.Get(leaseTokenHeader), id, ttl)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, multiGrantBody(g))
}

// multiLockID returns the {id} of a /multilocks/{id} route ("" on /multilocks): "m-" and a UUID.
func multiLockID(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if id == "" {
		return "", nil
	}
	if !lockcore.IsMultiLockID(id) {
		return "", invalidRequest("the multi-lock id in the path is not valid",
			[]api.InvalidParam{{Name: "id", Reason: "must be a multi-lock's id as its grant gave it: \"m-\" and a UUID"}})
	}
	return id, nil
}

// noIdempotencyKey refuses an Idempotency-Key: multi-lock calls do not keep answers for retries
// yet, and ignoring the header would promise what they do not do.
func noIdempotencyKey(r *http.Request) error {
	if r.Header.Get(idempotencyKeyHeader) == "" {
		return nil
	}
	return invalidRequest("Idempotency-Key is not supported on /multilocks: send the call without it",
		[]api.InvalidParam{{Name: idempotencyKeyHeader, Reason: "not supported on multi-lock calls"}})
}

func multiGrantBody(g lockcore.MultiGrant) api.MultiLockGrant {
	members := make([]api.MultiLockMember, len(g.Locks))
	for i, name := range g.Locks {
		members[i] = api.MultiLockMember{Lock: name, Fence: g.Fences[i]}
	}
	return api.MultiLockGrant{ID: g.ID, Owner: g.Owner, Token: g.Token, Mode: string(g.Mode), TTLms: g.TTL.Milliseconds(),
		ExpiresAt: api.Timestamp(g.ExpiresAt), Watchdog: g.Watchdog, Locks: members}
}
