package handlers

import (
	"net/http"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// Semaphores: /semaphores/{name}, a name space of their own. Each acquire takes one permit of a
// semaphore whose size (permits) the first acquirer sets; the rest is as for locks.

// acquireSemaphore handles POST /semaphores/{name}: 201 for a new permit, 200 for a re-entry.
// Semaphore names follow the rules of lock names.
func (h *lockHandlers) acquireSemaphore(w http.ResponseWriter, r *http.Request) {
	var req lockcore.AcquireRequest
	if !readAcquire[api.SemaphoreAcquireRequest](h, w, r, lockcore.KindSemaphore, &req) {
		return
	}
	h.grant(w, r, &req, "/semaphores/", func(g lockcore.Grant) any { return semaphoreGrantBody(g) })
}

// releaseSemaphore handles DELETE /semaphores/{name}, and ?force=true (see force.go).
func (h *lockHandlers) releaseSemaphore(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	if r.URL.Query().Has("force") {
		h.forceRelease(w, r, lockcore.SemaphoreRef(name))
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	rel, err := h.locker.Release(r.Context(), lockcore.ReleaseRequest{Ref: lockcore.SemaphoreRef(name),
		Token: r.Header.Get(leaseTokenHeader), IdempotencyKey: idem})
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, api.SemaphoreRelease{Semaphore: name, Released: rel.Released, Holds: rel.Holds})
}

// renewSemaphore handles POST /semaphores/{name}/renew.
func (h *lockHandlers) renewSemaphore(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	h.renewRef(w, r, lockcore.SemaphoreRef(name), func(g lockcore.Grant) any { return semaphoreGrantBody(g) })
}

// inspectSemaphore handles GET /semaphores/{name}.
func (h *lockHandlers) inspectSemaphore(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	st, err := h.locker.Inspect(r.Context(), lockcore.SemaphoreRef(name), r.Header.Get(leaseTokenHeader))
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, semaphoreStateBody(name, st))
}

// semaphoreStateBody renders a semaphore's state (GET /semaphores/{name}, and its events' state
// event).
func semaphoreStateBody(name string, st lockcore.State) api.SemaphoreState {
	return api.SemaphoreState{Name: name, Permits: st.Permits, Used: st.SharedCount,
		Holders: holders(st.Shared), HolderCount: st.SharedCount, Waiters: st.Waiters, Yours: st.Yours}
}

func semaphoreGrantBody(g lockcore.Grant) api.SemaphoreGrant {
	return api.SemaphoreGrant{
		Semaphore: g.Lock, Owner: g.Owner, Token: g.Token, Fence: g.Fence, TTLms: g.TTL.Milliseconds(),
		ExpiresAt: api.Timestamp(g.ExpiresAt), Holds: g.Holds, Watchdog: g.Watchdog, Permits: g.Permits, Used: g.Used,
	}
}
