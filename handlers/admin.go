package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// Admin is what the admin API needs of the lock engine; *lockcore.Service implements it.
type Admin interface {
	List(ctx context.Context, kind lockcore.Kind, prefix, cursor string, limit int) ([]lockcore.State, string, error)
	ListElections(ctx context.Context, prefix, cursor string, limit int) ([]lockcore.ElectionState, string, error)
	LongestHeld(ctx context.Context, limit int) ([]lockcore.OldHold, error)
	MostContended(n int) []lockcore.Contended
}

// adminHandlers serve the admin API: listings of held locks, semaphores and elections, and the
// top lists.
// With authentication they need the admin permission (routes.go), else they are open.
type adminHandlers struct {
	admin    Admin
	longHold time.Duration
	log      *slog.Logger
}

// topSize is how many entries each of GET /admin/top's lists holds at most.
const topSize = 10

// listQuery reads and checks a listing's prefix, limit and cursor.
func listQuery(r *http.Request) (prefix, cursor string, limit int, err error) {
	q := r.URL.Query()
	prefix, cursor, limit = q.Get("prefix"), q.Get("cursor"), 100
	var bad []api.InvalidParam
	if err := api.ValidateNamePrefix(prefix); err != nil {
		bad = append(bad, api.InvalidParam{Name: "prefix", Reason: err.Error()})
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > api.MaxListLimit {
			bad = append(bad, api.InvalidParam{Name: "limit", Reason: "must be an integer from 1 to " + strconv.Itoa(api.MaxListLimit)})
		}
		limit = n
	}
	if len(cursor) > 64 {
		bad = append(bad, api.InvalidParam{Name: "cursor", Reason: "must be a next_cursor a listing returned"})
	}
	if bad != nil {
		return "", "", 0, invalidRequest("the listing's query parameters are not valid", bad)
	}
	return prefix, cursor, limit, nil
}

// listLocks handles GET /locks?prefix=&limit=&cursor=.
func (h *adminHandlers) listLocks(w http.ResponseWriter, r *http.Request) {
	prefix, cursor, limit, err := listQuery(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	states, next, err := h.admin.List(r.Context(), lockcore.KindLock, prefix, cursor, limit)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	now := time.Now()
	body := api.LockList{Locks: make([]api.ListedLock, 0, len(states)), NextCursor: next}
	for _, st := range states {
		l := api.ListedLock{Lock: st.Ref.Name, Waiters: st.Waiters}
		first := st.Exclusive
		switch {
		case first != nil:
			l.Mode, l.Holders = string(lockcore.Exclusive), 1
		case len(st.Shared) > 0:
			first = &st.Shared[0]
			l.Mode, l.Holders = string(lockcore.Shared), st.SharedCount
		case listRedissonHolder(&l, st): // held by Redisson's clients alone
		default:
			continue
		}
		if first != nil {
			l.Owner, l.Fence, l.TTLms, l.Watchdog = first.Owner, first.Fence, first.TTL.Milliseconds(), first.Watchdog
			l.Multilock = lockcore.GroupOf(first.Lease)
		}
		l.AgeMs = st.OldestHold(now).Milliseconds()
		l.HeldBy, l.Waiting = listedHolders(st, now, true), listedWaiters(st.Waiting, true)
		body.Locks = append(body.Locks, l)
	}
	writeJSON(w, http.StatusOK, body)
}

// listSemaphores handles GET /semaphores?prefix=&limit=&cursor=.
func (h *adminHandlers) listSemaphores(w http.ResponseWriter, r *http.Request) {
	prefix, cursor, limit, err := listQuery(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	states, next, err := h.admin.List(r.Context(), lockcore.KindSemaphore, prefix, cursor, limit)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	now := time.Now()
	body := api.SemaphoreList{Semaphores: make([]api.ListedSemaphore, 0, len(states)), NextCursor: next}
	for _, st := range states {
		body.Semaphores = append(body.Semaphores, api.ListedSemaphore{Name: st.Ref.Name, Permits: st.Permits,
			Used: st.SharedCount, Waiters: st.Waiters, AgeMs: st.OldestHold(now).Milliseconds(),
			HeldBy: listedHolders(st, now, false), Waiting: listedWaiters(st.Waiting, false)})
	}
	writeJSON(w, http.StatusOK, body)
}

// listElections handles GET /elections?prefix=&limit=&cursor=.
func (h *adminHandlers) listElections(w http.ResponseWriter, r *http.Request) {
	prefix, cursor, limit, err := listQuery(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	states, next, err := h.admin.ListElections(r.Context(), prefix, cursor, limit)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	candidates, err := h.candidates(r.Context(), states, prefix, cursor, limit)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	body := api.ElectionList{Elections: make([]api.ElectionState, 0, len(states)), NextCursor: next}
	for _, st := range states {
		e := electionStateBody(st)
		e.Waiting = candidates[st.Election]
		body.Elections = append(body.Elections, e)
	}
	writeJSON(w, http.StatusOK, body)
}

// candidates names the candidates in line of the led elections among states, by election: the
// lines as a listing of the elections' locks reads them (List walks the same keys with the same
// cursor, so it finds the same page). It costs that walk only when some election has candidates.
// An election that walk does not show (vacant, or gone meanwhile) keeps its count without names.
func (h *adminHandlers) candidates(ctx context.Context, states []lockcore.ElectionState, prefix, cursor string, limit int) (map[string][]api.ListedWaiter, error) {
	if !slices.ContainsFunc(states, func(st lockcore.ElectionState) bool { return st.Candidates > 0 }) {
		return nil, nil
	}
	held, _, err := h.admin.List(ctx, lockcore.KindElection, prefix, cursor, limit)
	if err != nil {
		return nil, err
	}
	out := map[string][]api.ListedWaiter{}
	for _, st := range held {
		if len(st.Waiting) > 0 {
			out[st.Ref.Name] = listedWaiters(st.Waiting, false)
		}
	}
	return out, nil
}

// listedHolders lists st's holders for a listing: the exclusive one, then the shared ones; modes
// only for a lock's (withMode).
func listedHolders(st lockcore.State, now time.Time, withMode bool) []api.ListedHolder {
	out := make([]api.ListedHolder, 0, len(st.Shared)+1)
	add := func(h lockcore.Holder, mode lockcore.Mode) {
		l := api.ListedHolder{Owner: h.Owner, Fence: h.Fence, Holds: h.Holds, AgeMs: h.HeldFor(now).Milliseconds(),
			TTLms: h.TTL.Milliseconds(), Watchdog: h.Watchdog, Multilock: lockcore.GroupOf(h.Lease)}
		if withMode {
			l.Mode = string(mode)
		}
		out = append(out, l)
	}
	if st.Exclusive != nil {
		add(*st.Exclusive, lockcore.Exclusive)
	}
	for _, h := range st.Shared {
		add(h, lockcore.Shared)
	}
	return append(out, listedRedissonHolders(st, withMode)...)
}

// listedWaiters lists a listing's waiters; modes only for a lock's (withMode).
func listedWaiters(ws []lockcore.Waiter, withMode bool) []api.ListedWaiter {
	out := make([]api.ListedWaiter, 0, len(ws))
	for _, w := range ws {
		l := api.ListedWaiter{Owner: w.Owner, Since: api.Timestamp(w.Since), WaitedMs: w.Waited.Milliseconds(),
			Multilock: lockcore.GroupOf(w.Lease)}
		if withMode {
			l.Mode = string(w.Mode)
		}
		out = append(out, l)
	}
	return out
}

// top handles GET /admin/top: the longest-held holds (all replicas) and the most contended names
// (this replica, last minute or two).
func (h *adminHandlers) top(w http.ResponseWriter, r *http.Request) {
	held, err := h.admin.LongestHeld(r.Context(), topSize)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	body := api.Top{LongestHeld: make([]api.HeldLong, 0, len(held)), MostContended: []api.ContendedLock{},
		WindowS: 60, LongHoldMs: h.longHold.Milliseconds()}
	for _, l := range held {
		body.LongestHeld = append(body.LongestHeld, api.HeldLong{Lock: l.Ref.Name, Kind: l.Ref.Kind.String(), Owner: l.Owner,
			Fence: l.Fence, AgeMs: l.Age.Milliseconds(), Multilock: l.Multilock})
	}
	for _, c := range h.admin.MostContended(topSize) {
		body.MostContended = append(body.MostContended, api.ContendedLock{Lock: c.Ref.Name, Kind: c.Ref.Kind.String(), Count: c.Count})
	}
	writeJSON(w, http.StatusOK, body)
}
