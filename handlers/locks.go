package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// leaseTokenHeader carries a lease token on re-entry, release, renew and inspect.
const leaseTokenHeader = "Lease-Token"

// idempotencyKeyHeader makes a retried acquire, release or renew answer as the first try did.
const idempotencyKeyHeader = "Idempotency-Key"

// idempotencyKey returns the request's Idempotency-Key ("" when absent): 1-255 visible ASCII
// characters, so that it can be part of a Redis key name and never forges a log line. With
// authentication it is scoped to the principal ("name|key"), so that nobody collects another
// principal's answer by sending its key.
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get(idempotencyKeyHeader)
	if key == "" {
		return "", nil
	}
	if len(key) > 255 || strings.IndexFunc(key, func(c rune) bool { return c <= ' ' || c > '~' }) >= 0 {
		return "", invalidRequest("the Idempotency-Key header is not valid",
			[]api.InvalidParam{{Name: idempotencyKeyHeader, Reason: "must be 1-255 visible ASCII characters (a UUID is a good choice)"}})
	}
	if p := principalFrom(r.Context()); p != nil {
		return p.Name + "|" + key, nil
	}
	return key, nil
}

type lockHandlers struct {
	locker  Locker
	limits  api.Limits
	log     *slog.Logger
	quotas  *quotas // nil: none
	streams *streamGate
}

// acquire handles POST /locks/{name}: 201 for a new grant, 200 for a re-entry.
func (h *lockHandlers) acquire(w http.ResponseWriter, r *http.Request) {
	var req lockcore.AcquireRequest
	if !readAcquire[api.AcquireRequest](h, w, r, lockcore.KindLock, &req) {
		return
	}
	h.grant(w, r, &req, "/locks/", func(g lockcore.Grant) any { return grantBody(g) })
}

// readAcquire reads into *req what an acquire of a lock or a semaphore (kind) needs before
// lockcore: the name, the Idempotency-Key and the validated body of type B. It answers the problem
// and reports false when any is invalid. It fills *req rather than return a request: the frames on
// an acquire's way to Redis stay smaller (see lockcore's tryInto).
func readAcquire[B validating[api.Acquire]](h *lockHandlers, w http.ResponseWriter, r *http.Request, kind lockcore.Kind, req *lockcore.AcquireRequest) bool {
	name, err := lockName(r)
	var idem string
	if err == nil {
		idem, err = idempotencyKey(r)
	}
	var body api.Acquire
	if err == nil {
		body, err = readBody[api.Acquire, B](w, r, h.limits, false)
	}
	if err != nil {
		writeError(w, r, h.log, err)
		return false
	}
	*req = lockcore.AcquireRequest{
		Lock: name, Kind: kind, Owner: body.Owner, TTL: body.TTL, Wait: body.Wait, Watchdog: body.Watchdog, MaxHold: body.MaxHold,
		Token: r.Header.Get(leaseTokenHeader), QueueTicket: body.QueueTicket, IdempotencyKey: idem,
	}
	switch {
	case kind == lockcore.KindSemaphore:
		req.Permits = body.Permits
	case body.Shared:
		req.Mode = lockcore.Shared
	default:
		req.Mode = lockcore.Exclusive
	}
	return true
}

// grant runs an acquire (a lock's or a semaphore's) and answers it: 201 with a Location (location
// + the name) for a new grant, 200 for a re-entry. A waiting request runs on this goroutine until
// it is granted, its wait runs out, or its client leaves (which ends r.Context()). Its frame, and
// those of its callers, stay on the goroutine's stack while it waits: bulky work goes to callees
// (see lockcore.Service.acquire).
func (h *lockHandlers) grant(w http.ResponseWriter, r *http.Request, req *lockcore.AcquireRequest, location string, body func(lockcore.Grant) any) {
	p := principalFrom(r.Context())
	if p != nil {
		req.Principal, req.HeldCap = p.Name, heldCap(p)
	}
	if req.Wait > 0 && req.Token == "" {
		done, err := h.quotas.admitWait(p)
		if err != nil {
			writeError(w, r, h.log, err)
			return
		}
		defer done()
	}
	g, err := h.locker.Acquire(r.Context(), *req)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	h.deliver(w, r, req, &g, location, body)
}

// deliver answers grant g of req (see grant).
func (h *lockHandlers) deliver(w http.ResponseWriter, r *http.Request, req *lockcore.AcquireRequest, g *lockcore.Grant, location string, body func(lockcore.Grant) any) {
	status := http.StatusCreated
	if g.Reentered {
		status = http.StatusOK
	} else {
		w.Header().Set("Location", location+req.Lock)
	}
	writeJSON(w, status, body(*g))
	// A grant whose answer cannot reach its client would stay held for its whole TTL (or max hold,
	// with the watchdog): push the answer out now, and give the hold back if it did not go. With an
	// Idempotency-Key the client retries, and its retry collects the grant instead.
	if err := http.NewResponseController(w).Flush(); err != nil && req.IdempotencyKey != "" {
		h.log.Info("grant not delivered: client gone; kept for the retry with its Idempotency-Key", "request_id", requestIDFrom(r.Context()), req.Kind.String(), req.Lock, "err", err)
		setStatus(r.Context(), statusClientClosed, true)
	} else if err != nil {
		undo := lockcore.ReleaseRequest{Ref: g.Ref(), Token: g.Token, Mode: g.Mode}
		if _, rerr := h.locker.Release(context.WithoutCancel(r.Context()), undo); rerr != nil {
			h.log.Warn("giving back a grant whose answer was not delivered failed", "request_id", requestIDFrom(r.Context()), req.Kind.String(), req.Lock, "err", rerr)
		}
		h.log.Info("grant not delivered: client gone; hold given back", "request_id", requestIDFrom(r.Context()), req.Kind.String(), req.Lock, "err", err)
		setStatus(r.Context(), statusClientClosed, true)
	}
}

// release handles DELETE /locks/{name}[?mode=exclusive|shared], and ?force=true (see force.go).
func (h *lockHandlers) release(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	var query url.Values // nil without a query string, which is then not parsed (a map less per release)
	if r.URL.RawQuery != "" {
		query = r.URL.Query()
	}
	if query.Has("force") {
		h.forceRelease(w, r, lockcore.LockRef(name))
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	var mode lockcore.Mode
	switch m := query.Get("mode"); m {
	case "":
	case "exclusive", "shared":
		mode = lockcore.Mode(m)
	default:
		writeError(w, r, h.log, invalidRequest("the mode query parameter is not valid",
			[]api.InvalidParam{{Name: "mode", Reason: fmt.Sprintf("must be \"exclusive\" or \"shared\", got %q", m)}}))
		return
	}
	rel, err := h.locker.Release(r.Context(), lockcore.ReleaseRequest{Ref: lockcore.LockRef(name),
		Token: r.Header.Get(leaseTokenHeader), IdempotencyKey: idem, Mode: mode})
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Release{Lock: name, Released: rel.Released, Holds: rel.Holds, Mode: string(rel.Mode)})
}

// renew handles POST /locks/{name}/renew.
func (h *lockHandlers) renew(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	h.renewRef(w, r, lockcore.LockRef(name), func(g lockcore.Grant) any { return grantBody(g) })
}

// renewRef answers a renewal of ref's lease.
func (h *lockHandlers) renewRef(w http.ResponseWriter, r *http.Request, ref lockcore.Ref, body func(lockcore.Grant) any) {
	if _, err := idempotencyKey(r); err != nil { // validated, though a renewal needs no idempotency record
		writeError(w, r, h.log, err)
		return
	}
	ttl, err := readBody[time.Duration, api.RenewRequest](w, r, h.limits, true)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	g, err := h.locker.Renew(r.Context(), ref, r.Header.Get(leaseTokenHeader), ttl)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, body(g))
}

// inspect handles GET /locks/{name}.
func (h *lockHandlers) inspect(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	st, err := h.locker.Inspect(r.Context(), lockcore.LockRef(name), r.Header.Get(leaseTokenHeader))
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, lockStateBody(name, st))
}

// lockStateBody renders a lock's state (GET /locks/{name}, and its events' state event).
func lockStateBody(name string, st lockcore.State) api.LockState {
	body := api.LockState{Lock: name, Held: st.Held(), Waiters: st.Waiters, Yours: st.Yours}
	if x := st.Exclusive; x != nil {
		body.Mode = string(lockcore.Exclusive)
		body.Owner, body.Fence, body.Holds = x.Owner, x.Fence, x.Holds
		body.TTLms, body.Watchdog = ptr(x.TTL.Milliseconds()), ptr(x.Watchdog)
		if x.Watchdog {
			body.MaxHoldLeftms = ptr(x.HoldLeft.Milliseconds())
			body.MaxHoldms = body.MaxHoldLeftms // deprecated name, kept for older clients
		}
		body.Multilock = lockcore.GroupOf(x.Lease)
	} else if st.SharedCount > 0 {
		body.Mode = string(lockcore.Shared)
	}
	if st.SharedCount > 0 {
		body.Holders, body.HolderCount = holders(st.Shared), ptr(st.SharedCount)
	}
	addRedissonHolders(&body, st)
	return body
}

// holders renders shared holders for a state body.
func holders(hs []lockcore.Holder) []api.Holder {
	out := make([]api.Holder, 0, len(hs))
	for _, h := range hs {
		a := api.Holder{Owner: h.Owner, Fence: h.Fence, Holds: h.Holds, TTLms: h.TTL.Milliseconds(), Watchdog: h.Watchdog,
			Multilock: lockcore.GroupOf(h.Lease)}
		if h.Watchdog {
			a.MaxHoldLeftms = ptr(h.HoldLeft.Milliseconds())
			a.MaxHoldms = a.MaxHoldLeftms // deprecated name, kept for older clients
		}
		out = append(out, a)
	}
	return out
}

func grantBody(g lockcore.Grant) api.Grant {
	return api.Grant{
		Lock: g.Lock, Owner: g.Owner, Token: g.Token, Fence: g.Fence, TTLms: g.TTL.Milliseconds(),
		ExpiresAt: api.Timestamp(g.ExpiresAt), Holds: g.Holds, Watchdog: g.Watchdog, Mode: string(g.Mode),
	}
}
