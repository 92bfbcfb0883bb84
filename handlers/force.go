package handlers

import (
	"fmt"
	"net/http"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// forceRelease handles DELETE /locks/{name}?force=true and DELETE /semaphores/{name}?force=true:
// every hold is removed, whoever holds it, and the line's head gets what that frees. It is an
// operator's call: it takes no token, and writes one audit log line (WARN "lock force-released")
// naming who asked (the request ID, remote address and, with authentication, the principal) and
// the owners and fences removed. With authentication it needs the admin permission (routes.go);
// without, it is open to anyone who can reach the gateway.
func (h *lockHandlers) forceRelease(w http.ResponseWriter, r *http.Request, ref lockcore.Ref) {
	if err := checkForce(r, ref); err != nil {
		writeError(w, r, h.log, err)
		return
	}
	f, err := h.locker.ForceRelease(r.Context(), ref)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	owners, fences := make([]string, 0, len(f.Holds)), make([]int64, 0, len(f.Holds))
	removed := make([]api.RemovedHold, 0, len(f.Holds))
	for _, hold := range f.Holds {
		owners, fences = append(owners, hold.Owner), append(fences, hold.Fence)
		removed = append(removed, api.RemovedHold{Owner: hold.Owner, Fence: hold.Fence, Mode: string(hold.Mode),
			Multilock: lockcore.GroupOf(hold.Lease)})
	}
	who := []any{"lock", ref.Name, "kind", ref.Kind.String(), "request_id", requestIDFrom(r.Context()), "remote_addr", r.RemoteAddr}
	if p := principalName(r.Context()); p != "" { // authentication on
		who = append(who, "principal", p)
	}
	h.log.Warn("lock force-released", append(who, "owners", owners, "fences", fences, "holds_removed", len(f.Holds),
		"waiters_granted", f.Granted)...)
	n := int64(len(f.Holds))
	if ref.Kind == lockcore.KindElection {
		writeJSON(w, http.StatusOK, api.ElectionForceRelease{Election: ref.Name, Released: true, Forced: true, HoldsRemoved: n, Removed: removed})
		return
	}
	if ref.Kind == lockcore.KindSemaphore {
		writeJSON(w, http.StatusOK, api.SemaphoreForceRelease{Semaphore: ref.Name, Released: true, Forced: true, HoldsRemoved: n, Removed: removed})
		return
	}
	writeJSON(w, http.StatusOK, api.ForceRelease{Lock: ref.Name, Released: true, Forced: true, HoldsRemoved: n, Removed: removed})
}

// checkForce validates a force release before anything touches Redis: force must be exactly
// "true", and nothing that belongs to giving back one's own hold may come with it.
func checkForce(r *http.Request, ref lockcore.Ref) error {
	q := r.URL.Query()
	if v := q["force"]; len(v) != 1 || v[0] != "true" {
		reason := fmt.Sprintf(`must be "true" (release every hold), or absent; got %q`, v[0])
		if len(v) > 1 {
			reason = fmt.Sprintf("must be given once, got it %d times", len(v))
		}
		return invalidRequest("the force query parameter is not valid", []api.InvalidParam{{Name: "force", Reason: reason}})
	}
	if len(r.Header.Values(leaseTokenHeader)) > 0 {
		return invalidRequest(fmt.Sprintf("a force release takes no Lease-Token: it releases every hold of the %s, whoever holds it; "+
			"to give back your own hold, send your Lease-Token without force=true", ref.Kind),
			[]api.InvalidParam{{Name: leaseTokenHeader, Reason: "must be absent with force=true"}})
	}
	if q.Has("mode") {
		return invalidRequest("mode picks a hold of your own lease; a force release removes every hold",
			[]api.InvalidParam{{Name: "mode", Reason: "must be absent with force=true"}})
	}
	if len(r.Header.Values(idempotencyKeyHeader)) > 0 {
		return invalidRequest(fmt.Sprintf("a force release is not replayed to retries: look at GET /%ss/%s before forcing again "+
			"(a second force would take the hold of the waiter the first one let in)", ref.Kind, ref.Name),
			[]api.InvalidParam{{Name: idempotencyKeyHeader, Reason: "must be absent with force=true"}})
	}
	return nil
}
