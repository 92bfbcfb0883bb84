package handlers

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// Elections: /elections/{name}, a name space of its own. A campaign is an exclusive acquire of the
// election that, once granted, announces its leader with a value; the leader proclaims new values
// and resigns with its token; anyone with inspect reads and observes the election.

// Elections is the election engine the handlers drive; *lockcore.Service implements it.
type Elections interface {
	Campaign(ctx context.Context, req lockcore.CampaignRequest) (lockcore.Leadership, error)
	Proclaim(ctx context.Context, req lockcore.ProclaimRequest) (lockcore.Leader, error)
	Resign(ctx context.Context, req lockcore.ResignRequest) (lockcore.Resigned, error)
	Leader(ctx context.Context, name string) (lockcore.ElectionState, error)
	Observe(ctx context.Context, name, lastEventID string) (*lockcore.ElectionStream, error)
}

// lastEventIDHeader is what an EventSource sends when it reconnects: the id of the last event it
// got.
const lastEventIDHeader = "Last-Event-ID"

// electionHandlers serve /elections: lockHandlers' limits, quotas and streams, and the elections.
type electionHandlers struct {
	*lockHandlers
	elections Elections
}

// electionName is lockName for an election: its names follow the rules of lock names.
func electionName(r *http.Request) (string, error) {
	name, err := lockName(r)
	if re, ok := err.(*requestError); ok {
		re.title = "Invalid election name"
		re.detail = strings.Replace(re.detail, "lock name", "election name", 1)
	}
	return name, err
}

// campaign handles POST /elections/{name}: 201 once elected, with the leader's lease.
func (h *electionHandlers) campaign(w http.ResponseWriter, r *http.Request) {
	name, err := electionName(r)
	var idem string
	if err == nil {
		idem, err = idempotencyKey(r)
	}
	var req api.Campaign
	if err == nil {
		req, err = readBody[api.Campaign, api.CampaignRequest](w, r, h.limits, false)
	}
	if err == nil && len(r.Header.Values(leaseTokenHeader)) > 0 {
		err = invalidRequest("a campaign takes no Lease-Token: a leader sets its value with PUT /elections/{name} and its token",
			[]api.InvalidParam{{Name: leaseTokenHeader, Reason: "must be absent on a campaign"}})
	}
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	p := principalFrom(r.Context())
	if err := h.quotas.allowN(p, valueRequests(req.Value)); err != nil {
		writeError(w, r, h.log, err)
		return
	}
	creq := lockcore.CampaignRequest{Election: name, Owner: req.Owner, Value: req.Value, TTL: req.TTL, Wait: req.Wait,
		Watchdog: req.Watchdog, MaxHold: req.MaxHold, QueueTicket: req.QueueTicket, IdempotencyKey: idem}
	if p != nil {
		creq.Principal, creq.HeldCap = p.Name, heldCap(p)
	}
	if creq.Wait > 0 {
		done, err := h.quotas.admitWait(p)
		if err != nil {
			writeError(w, r, h.log, err)
			return
		}
		defer done()
	}
	l, err := h.elections.Campaign(r.Context(), creq)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	w.Header().Set("Location", "/elections/"+name)
	writeJSON(w, http.StatusCreated, leadershipBody(l))
	// As for a lock's grant (see grant): a leader whose answer cannot reach it resigns at once,
	// unless its retry with the Idempotency-Key will collect the lead.
	if err := http.NewResponseController(w).Flush(); err != nil && idem != "" {
		h.log.Info("election not delivered: client gone; kept for the retry with its Idempotency-Key", "request_id", requestIDFrom(r.Context()), "election", name, "err", err)
		setStatus(r.Context(), statusClientClosed, true)
	} else if err != nil {
		if _, rerr := h.elections.Resign(context.WithoutCancel(r.Context()), lockcore.ResignRequest{Election: name, Token: l.Token}); rerr != nil {
			h.log.Warn("resigning a lead whose answer was not delivered failed", "request_id", requestIDFrom(r.Context()), "election", name, "err", rerr)
		}
		h.log.Info("election not delivered: client gone; resigned", "request_id", requestIDFrom(r.Context()), "election", name, "err", err)
		setStatus(r.Context(), statusClientClosed, true)
	}
}

// proclaim handles PUT /elections/{name}: the leader (its Lease-Token) announces a new value.
func (h *electionHandlers) proclaim(w http.ResponseWriter, r *http.Request) {
	name, err := electionName(r)
	var idem, value string
	if err == nil {
		idem, err = idempotencyKey(r)
	}
	if err == nil {
		value, err = readBody[string, api.ProclaimRequest](w, r, h.limits, false)
	}
	if err == nil {
		err = h.quotas.allowN(principalFrom(r.Context()), valueRequests(value))
	}
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	l, err := h.elections.Proclaim(r.Context(), lockcore.ProclaimRequest{Election: name, Token: r.Header.Get(leaseTokenHeader),
		Value: value, IdempotencyKey: idem})
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Proclamation{Election: name, ElectionLeader: leaderBody(l)})
}

// resign handles DELETE /elections/{name}: the leader gives up the lead, and the first candidate
// in line is elected at once; ?force=true takes the lead from whoever has it (see force.go).
func (h *electionHandlers) resign(w http.ResponseWriter, r *http.Request) {
	name, err := electionName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	if r.URL.Query().Has("force") {
		h.forceRelease(w, r, lockcore.ElectionRef(name))
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	res, err := h.elections.Resign(r.Context(), lockcore.ResignRequest{Election: name, Token: r.Header.Get(leaseTokenHeader), IdempotencyKey: idem})
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Resignation{Election: name, Resigned: true, Fence: res.Fence, EventID: res.EventID})
}

// renewElection handles POST /elections/{name}/renew: a leader keeps its lease.
func (h *electionHandlers) renewElection(w http.ResponseWriter, r *http.Request) {
	name, err := electionName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	h.renewRef(w, r, lockcore.ElectionRef(name), func(g lockcore.Grant) any {
		return api.ElectionRenewal{Election: g.Lock, Owner: g.Owner, Token: g.Token, Fence: g.Fence, TTLms: g.TTL.Milliseconds(),
			ExpiresAt: api.Timestamp(g.ExpiresAt), Watchdog: g.Watchdog}
	})
}

// leader handles GET /elections/{name}.
func (h *electionHandlers) leader(w http.ResponseWriter, r *http.Request) {
	name, err := electionName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	st, err := h.elections.Leader(r.Context(), name)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, electionStateBody(st))
}

func leadershipBody(l lockcore.Leadership) api.Leadership {
	return api.Leadership{Election: l.Lock, Owner: l.Owner, Value: l.Value, Token: l.Token, Fence: l.Fence, TTLms: l.TTL.Milliseconds(),
		ExpiresAt: api.Timestamp(l.ExpiresAt), Watchdog: l.Watchdog, Since: api.Timestamp(l.Since), EventID: l.EventID}
}

func electionStateBody(st lockcore.ElectionState) api.ElectionState {
	body := api.ElectionState{Election: st.Election, Led: st.Leader != nil, Candidates: st.Candidates, LastEventID: st.LastEventID}
	if l := st.Leader; l != nil {
		body.Leader = ptr(leaderBody(*l))
	}
	return body
}

func leaderBody(l lockcore.Leader) api.ElectionLeader {
	return api.ElectionLeader{Owner: l.Owner, Value: l.Value, Fence: l.Fence, Since: api.Timestamp(l.Since), TTLms: l.TTL.Milliseconds(),
		EventID: l.EventID}
}

// electionEvents handles GET /elections/{name}/events: the election's announcements as
// Server-Sent Events (see lockcore.ElectionStream), each with the log entry's id as its id, so
// that a client reconnecting with Last-Event-ID (as EventSource does) goes on exactly after the
// last event it got, on any replica. The first event is a state (without Last-Event-ID, or when
// the events after it are no longer in the log: then with "gap": true); the stream ends when the
// client leaves, the gateway shuts down or closes it ("closed", which has no id, so that a
// reconnection resumes after the event before it).
func (h *electionHandlers) electionEvents(w http.ResponseWriter, r *http.Request) {
	name, err := electionName(r)
	if err == nil && len(r.Header.Values(lastEventIDHeader)) > 1 {
		err = invalidRequest("the Last-Event-ID header appears more than once",
			[]api.InvalidParam{{Name: lastEventIDHeader, Reason: "must appear at most once"}})
	}
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	admitted, err := h.streams.admit(r, h.quotas)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	defer admitted()
	st, err := h.elections.Observe(r.Context(), name, strings.TrimSpace(r.Header.Get(lastEventIDHeader)))
	if err != nil {
		if errors.Is(err, lockcore.ErrInvalid) {
			err = invalidRequest(after(err, lockcore.ErrInvalid), []api.InvalidParam{{Name: lastEventIDHeader,
				Reason: "must be the id of an event of this election's stream (<ms>-<seq>), as sent"}})
		}
		writeError(w, r, h.log, err)
		return
	}
	defer st.Close()
	h.serveEvents(w, r, &electionEventSource{st: st, name: name})
}

// electionEventSource is an election's stream as an eventSource.
type electionEventSource struct {
	st   *lockcore.ElectionStream
	name string
}

func (e *electionEventSource) next(ctx context.Context, buf *bytes.Buffer) (bool, error) {
	ev, err := e.st.Next(ctx)
	if err != nil {
		return false, err
	}
	at := api.Timestamp(ev.At)
	var data any
	switch ev.Type {
	case lockcore.ElectionStateEvent:
		data = api.ElectionStateEvent{ElectionState: electionStateBody(ev.State), At: at, Gap: ev.Gap}
	default:
		body := api.LeaderEvent{Election: e.name, At: at, Owner: ev.Owner, Fence: ev.Fence}
		if ev.Type == lockcore.ElectionElected || ev.Type == lockcore.ElectionProclaimed {
			body.Value = &ev.Value
		}
		data = body
	}
	writeSSE(buf, ev.ID, string(ev.Type), data)
	return false, nil
}

func (e *electionEventSource) closed(buf *bytes.Buffer, at time.Time, reason, detail string) {
	writeSSE(buf, "", "closed", api.ElectionClosedEvent{Election: e.name, At: api.Timestamp(at), Reason: reason, Detail: detail})
}

func (e *electionEventSource) done() <-chan struct{} { return e.st.Done() }
