package leasegate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WatchLoss says when a lease follows its lock's events stream (GET /locks/{name}/events, or
// /semaphores/{name}/events, with its Lease-Token) to learn that it was lost the moment the
// gateway knows: a force release or an expiry then closes Done within milliseconds, instead of at
// the next renewal. A watched lease keeps one more HTTP connection open for as long as it lives
// (a multi-lock, one per member), and its lock's changes publish events in Redis while anyone
// watches it.
type WatchLoss int

const (
	// WatchKept, the default, watches a lease from KeepAlive on, and a watchdog lease from its
	// grant: the leases that live long and whose work waits on Done. A lease taken for one short
	// call costs no extra connection.
	WatchKept WatchLoss = iota
	// WatchAlways watches the lease from its grant.
	WatchAlways
	// WatchNever leaves Done to renewals, releases and the lapse timer (Watch still starts it).
	WatchNever
)

const (
	watchPauseMin = 100 * time.Millisecond // before reconnecting a stream that ended
	watchPauseMax = 5 * time.Second        // at most, after failed reconnections (doubling)
	// watchIdle: a stream that sends nothing for this long is taken for dead and reopened (the
	// gateway sends a comment line after 15 s without an event).
	watchIdle = 45 * time.Second
	// confirmTimeout bounds the renewal that confirms a member's loss (see watchTarget.confirm).
	confirmTimeout = 5 * time.Second
)

// watchTarget is one events stream a lease follows: its lock's, with its token; or, for a
// multi-lock (whose token the events endpoints refuse), each member's, without a token, looking
// for the member's fence in the events.
type watchTarget struct {
	calls     calls // lockCalls or semaphoreCalls
	name      string
	token     string // "" for a multi-lock's member
	fence     int64
	multilock string // the group's id, for a member
	election  bool   // an election's lead: its stream (without token) is the observers'
	// forced, for an election's lead, asks gw whether an operator force-released the lead, which
	// its stream's vacant event does not say.
	forced func(ctx context.Context, gw *Gateway) bool
	// confirm, for a member, renews the group: a stream that finds the member's fence gone tells
	// only that something happened in a gap, and the group's renewal says for sure (a 410 naming
	// the lost members, which also frees the others).
	confirm func(ctx context.Context) error
}

// watch starts one goroutine per target, following its stream through gws in turn until the
// lease ends; it does nothing when the lease is watched already or has ended. The lease's context
// owns the goroutines: they return once it is done.
func (l *lifetime) watch(targets []watchTarget, gws []*Gateway) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.targets > 0 || l.ctx.Err() != nil || len(gws) == 0 {
		return
	}
	l.targets = len(targets)
	l.watchers.Add(len(targets))
	for _, t := range targets {
		w := &watcher{life: l, gws: gws, target: t}
		go func() {
			defer l.watchers.Done()
			w.run()
		}()
	}
}

// awaitWatchers waits, once the lease has ended, for its watchers' goroutines to return (their
// streams closed). Seeing the end with mu held orders it after any watchers.Add.
func (l *lifetime) awaitWatchers() {
	l.mu.Lock()
	ended := l.ctx.Err() != nil
	l.mu.Unlock()
	if ended {
		l.watchers.Wait()
	}
}

// Watching reports whether the lease's events stream is open (for a multi-lock, every member's),
// so that a loss would close Done within milliseconds: false before the stream's first event,
// while it reconnects, once the lease has ended, and for a lease that is not watched (see
// WatchLoss).
func (l *lifetime) Watching() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.targets > 0 && l.open == l.targets && l.ctx.Err() == nil
}

func (l *lifetime) streamOpen(delta int) {
	l.mu.Lock()
	l.open += delta
	l.mu.Unlock()
}

// confirmGone runs confirm (a renewal, which ends the lease if it answers 410) after any release
// of the lease in flight, and reports whether the lease has ended.
func (l *lifetime) confirmGone(confirm func(ctx context.Context) error) bool {
	l.releases.Lock()
	defer l.releases.Unlock()
	if l.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(l.ctx, confirmTimeout)
		_ = confirm(ctx)
		cancel()
	}
	return l.ctx.Err() != nil
}

// endUnlessReleased ends the lease with cause, after any release of it in flight: when the
// gateway says that the lease is gone without saying why, that release may be what freed it, and
// its answer (ErrReleased) comes first.
func (l *lifetime) endUnlessReleased(cause error) {
	l.releases.Lock()
	defer l.releases.Unlock()
	l.end(cause)
}

// watcher follows one watchTarget's stream, reopening it when it ends while the lease lives.
type watcher struct {
	life   *lifetime
	gws    []*Gateway
	target watchTarget
}

// run follows the stream, through the next gateway after each end, until the lease ends or the
// stream tells that it was lost. Reconnections pause watchPauseMin, doubling up to watchPauseMax
// while they fail. A reopened stream is itself the check that the lease survived the gap: the
// gateway answers 410 to a token whose lease no longer holds the lock (and a member's first
// event shows whether it still holds its fence).
func (w *watcher) run() {
	ctx := w.life.ctx
	pause := watchPauseMin
	for via := 0; ; via++ {
		opened, done := w.follow(ctx, w.gws[via%len(w.gws)])
		if done || ctx.Err() != nil {
			return
		}
		if opened {
			pause = watchPauseMin
		}
		if sleep(ctx, pause/2+rand.N(pause/2+1)) != nil {
			return
		}
		if !opened {
			pause = min(2*pause, watchPauseMax)
		}
	}
}

// follow opens the stream through gw and reads it until it ends. opened reports whether it
// delivered its first event; done, that there is nothing more to watch (the lease ended, or the
// gateway cannot stream it).
func (w *watcher) follow(ctx context.Context, gw *Gateway) (opened, done bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := w.target.calls.watch(ctx, gw, w.target.name, w.target.token)
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		err := problem(resp, body)
		switch resp.StatusCode {
		case http.StatusGone:
			w.lost(EndGone, time.Time{}, err)
			return false, true
		case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			return false, true // a gateway without events streams, or a token they refuse
		}
		return false, false // 503 and the like: try again
	}
	idle := time.AfterFunc(watchIdle, cancel)
	defer idle.Stop()
	events := NewEventReader(activity{r: resp.Body, idle: idle})
	for {
		ev, err := events.Next()
		if err != nil {
			return opened, false
		}
		if !opened {
			opened = true
			w.life.streamOpen(1)
			defer w.life.streamOpen(-1)
		}
		if w.handle(ev, gw) {
			return true, true
		}
	}
}

// handle acts on one event of gw's stream and reports whether it ended the lease.
func (w *watcher) handle(ev Event, gw *Gateway) bool {
	t := w.target
	var body struct {
		Fence  int64     `json:"fence"`
		Reason string    `json:"reason"`
		At     time.Time `json:"at"`
		Holds  []struct {
			Fence int64 `json:"fence"`
		} `json:"holds"`
	}
	if t.election {
		return w.handleElection(ev, gw)
	}
	switch {
	case ev.Type == "lost" && t.token != "":
		_ = json.Unmarshal(ev.Data, &body)
		reason := EndGone
		switch body.Reason {
		case "expired":
			reason = EndExpired
		case "forced":
			reason = EndForced
		}
		w.lost(reason, body.At, nil)
		return true
	case t.token != "":
		return false // a stream with the token says lost, after the expired or forced event
	case ev.Type == "state":
		var st LockState
		if json.Unmarshal(ev.Data, &st) == nil && !holdsFence(&st, t.fence) {
			return w.life.confirmGone(t.confirm) // if the renewal succeeds, the member is still held
		}
	case ev.Type == "expired":
		if json.Unmarshal(ev.Data, &body) == nil && body.Fence == t.fence {
			w.lost(EndExpired, body.At, nil)
			return true
		}
	case ev.Type == "forced":
		if json.Unmarshal(ev.Data, &body) != nil {
			return false
		}
		for _, h := range body.Holds {
			if h.Fence == t.fence {
				w.lost(EndForced, body.At, nil)
				return true
			}
		}
	}
	return false
}

// handleElection acts on one event of gw's stream of an election, for the lead of fence t.fence,
// and reports whether it ended the lease. A state that shows another lead (or none) is confirmed
// by a renewal, as for a multi-lock's member; a vacant naming the lead's fence is the gateway
// finding its lease gone (run out or forced: see leadVacated); a resigned naming it may be a
// resignation through another replica, and waits for a release in flight.
func (w *watcher) handleElection(ev Event, gw *Gateway) bool {
	t := w.target
	var body struct {
		Fence  int64           `json:"fence"`
		At     time.Time       `json:"at"`
		Led    bool            `json:"led"`
		Leader *ElectionLeader `json:"leader"`
	}
	if json.Unmarshal(ev.Data, &body) != nil {
		return false
	}
	switch ev.Type {
	case "state":
		if !body.Led || body.Leader == nil || body.Leader.Fence != t.fence {
			return w.life.confirmGone(t.confirm) // if the renewal succeeds, the lead still holds
		}
	case "vacant":
		if body.Fence == t.fence {
			w.leadVacated(body.At, gw)
			return true
		}
	case "resigned":
		if body.Fence == t.fence {
			w.lost(EndGone, body.At, nil)
			return true
		}
	}
	return false
}

// leadVacated ends the lead a vacant event named: EndForced when gw says that an operator
// force-released it, else EndGone (its lease ran out, or gw could not tell). The event says only
// that the lease is gone; one renewal, answered 410, says why.
func (w *watcher) leadVacated(at time.Time, gw *Gateway) {
	reason := EndGone
	if w.target.forced != nil {
		ctx, cancel := context.WithTimeout(w.life.ctx, confirmTimeout)
		if w.target.forced(ctx, gw) {
			reason = EndForced
		}
		cancel()
	}
	w.lost(reason, at, nil)
}

// holdsFence reports whether st shows a hold with fence f, or may (it lists only the first
// shared holders).
func holdsFence(st *LockState, f int64) bool {
	if !st.Held {
		return false
	}
	if st.Fence != nil && *st.Fence == f {
		return true
	}
	if st.Holders == nil {
		return false
	}
	for _, h := range *st.Holders {
		if h.Fence == f {
			return true
		}
	}
	return st.HolderCount != nil && *st.HolderCount > int64(len(*st.Holders))
}

// lost ends the lease with a *LostError. A loss the gateway names (expired, forced) ends it at
// once; one it does not (gone) waits for a release in flight, which may be what freed the lock.
func (w *watcher) lost(reason EndReason, at time.Time, err error) {
	cause := &LostError{Lock: w.target.name, MultiLock: w.target.multilock, Election: w.target.election,
		Fence: w.target.fence, Reason: reason, At: at, Err: err}
	if reason == EndGone {
		w.life.endUnlessReleased(cause)
		return
	}
	w.life.end(cause)
}

// activity resets idle on every read that brings bytes.
type activity struct {
	r    io.Reader
	idle *time.Timer
}

func (a activity) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.idle.Reset(watchIdle)
	}
	return n, err
}

// Event is one Server-Sent Event of a gateway's events stream (GET /locks/{name}/events and the
// like): its type, its id ("" when it has none) and its data lines joined by newlines (the JSON
// openapi.yaml documents for each type).
type Event struct {
	Type string
	ID   string
	Data []byte
}

// EventReader reads the events of a text/event-stream, skipping comments (the gateway's
// keep-alive): for callers that follow a stream themselves, as the SDK's watchers and Observe do.
type EventReader struct {
	r *bufio.Reader
}

// NewEventReader reads the events of the text/event-stream r.
func NewEventReader(r io.Reader) *EventReader { return &EventReader{r: bufio.NewReader(r)} }

// Next returns the next event, or the read error that ended the stream (an event cut short by it
// is dropped, as the format wants).
func (s *EventReader) Next() (Event, error) {
	var ev Event
	seen := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return Event{}, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if seen {
				if ev.Type == "" {
					ev.Type = "message"
				}
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: the keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Type, seen = value, true
		case "id":
			ev.ID = value
		case "data":
			if ev.Data != nil {
				ev.Data = append(ev.Data, '\n')
			}
			ev.Data, seen = append(ev.Data, value...), true
		}
	}
}

// LostError is Err's cause when a lease's events stream told that the lease was lost. It matches
// ErrLeaseGone, and ErrLeaseExpired or ErrLeaseForced by its Reason.
type LostError struct {
	Lock      string    // the lock's name (a permit's semaphore; a multi-lock's member that was lost)
	MultiLock string    // the group's id, for a multi-lock; "" otherwise
	Election  bool      // the lease was an election's lead (Lock is the election's name)
	Fence     int64     // the lost hold's fence
	Reason    EndReason // EndExpired, EndForced, or EndGone (found gone: expired, forced or released elsewhere)
	At        time.Time // when, by the gateway's clock; zero when it did not say
	Err       error     // the 410 *ProblemError of a reconnection, when that is how it was found gone
}

func (e *LostError) Error() string {
	what := "lease on " + strconv.Quote(e.Lock)
	if e.Election {
		what = "lead of election " + strconv.Quote(e.Lock)
	}
	if e.MultiLock != "" {
		what = "multi-lock " + strconv.Quote(e.MultiLock) + ": member " + strconv.Quote(e.Lock)
	}
	switch e.Reason {
	case EndExpired:
		return what + " lost: it expired on the gateway"
	case EndForced:
		return what + " lost: force-released"
	}
	if e.Err != nil {
		return what + " lost: " + e.Err.Error()
	}
	return what + " lost: the gateway no longer has it"
}

// Is matches ErrLeaseGone, and ErrLeaseExpired or ErrLeaseForced by Reason.
func (e *LostError) Is(target error) bool {
	switch target {
	case ErrLeaseGone:
		return true
	case ErrLeaseExpired:
		return e.Reason == EndExpired
	case ErrLeaseForced:
		return e.Reason == EndForced
	}
	return false
}

func (e *LostError) Unwrap() error { return e.Err }

// EndReason says why work under a lease had to stop (Lease.EndReason).
type EndReason string

const (
	EndReleased EndReason = "released" // its own Release (ErrReleased)
	EndExpired  EndReason = "expired"  // it ran out on the gateway, as its events stream told (ErrLeaseExpired)
	EndForced   EndReason = "forced"   // an operator force-released it (ErrLeaseForced)
	// EndGone: a call answered 410, or its events stream found it gone without knowing how
	// (ErrLeaseGone).
	EndGone EndReason = "gone"
	// EndLapsing: no renewal succeeded, and it could lapse within its safety margin
	// (ErrLeaseLapsing).
	EndLapsing EndReason = "lapsing"
)

// EndReason is why work under the lease had to stop (see Err), or "" while it may go on.
func (l *lifetime) EndReason() EndReason {
	err := l.Err()
	var lost *LostError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &lost):
		return lost.Reason
	case errors.Is(err, ErrReleased):
		return EndReleased
	case errors.Is(err, ErrLeaseLapsing):
		return EndLapsing
	}
	return EndGone
}
