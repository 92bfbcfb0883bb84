package leasegate

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"time"
)

// ElectionEvent is one event of an election's stream (Observe). ID is its entry in the election's
// log, the same on every replica: pass it back to Observe to go on after it.
type ElectionEvent struct {
	ID   string
	Type string    // "state", "elected", "proclaimed", "resigned" or "vacant"
	At   time.Time // by the gateway's clock
	// Owner and Fence name the leader an elected, proclaimed, resigned or vacant event is about;
	// Value is the value an elected or proclaimed event announces.
	Owner string
	Fence int64
	Value string
	// State is a state event's election (who leads, the candidates waiting); nil for the others.
	State *ElectionState
	// Gap is true for a state that stands for events the log no longer holds: the observer missed
	// something, and State is where the election stands now.
	Gap bool
}

// Observe follows the election name's events from after lastEventID ("" for a state event first,
// then what follows it) until ctx ends, and returns them on a channel that closes then. It
// reconnects whenever the stream ends (a gateway restarting, LEASEGATE_MAX_STREAM_LIFETIME),
// through this gateway and via (other replicas) in turn, pausing 100 ms to 5 s, with the id of the
// last event received as Last-Event-ID: nothing is missed or repeated as long as the log holds the
// next event, and otherwise the stream says so with a state event whose Gap is true. The channel
// is unbuffered: events wait for the reader. A gateway that refuses the stream (an unknown
// election name, missing permission: 4xx) is retried at the same pace; check with
// InspectElection first when that matters.
//
// The HTTP client of the gateways must not time out whole requests (http.Client.Timeout).
func (c *Gateway) Observe(ctx context.Context, name, lastEventID string, via ...*Gateway) <-chan ElectionEvent {
	out := make(chan ElectionEvent)
	gws := append([]*Gateway{c}, via...)
	go func() {
		defer close(out)
		o := observer{name: name, last: lastEventID, out: out}
		pause := watchPauseMin
		for i := 0; ; i++ {
			if o.follow(ctx, gws[i%len(gws)]) {
				pause = watchPauseMin
			}
			if sleep(ctx, pause/2+rand.N(pause/2+1)) != nil {
				return
			}
			pause = min(2*pause, watchPauseMax)
		}
	}()
	return out
}

// observer is Observe's state across reconnections.
type observer struct {
	name string
	last string // the id of the last event delivered
	out  chan<- ElectionEvent
}

// follow reads one connection's events until it ends, and reports whether it delivered any.
func (o *observer) follow(ctx context.Context, gw *Gateway) (delivered bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	params := &ObserveElectionParams{}
	if o.last != "" {
		params.LastEventID = &o.last
	}
	resp, err := gw.API.ObserveElection(ctx, o.name, params)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	idle := time.AfterFunc(watchIdle, cancel)
	defer idle.Stop()
	events := NewEventReader(activity{r: resp.Body, idle: idle})
	for {
		ev, err := events.Next()
		if err != nil {
			return delivered
		}
		e, ok := electionEvent(ev)
		if !ok {
			continue // closed (no id: the reconnection resumes before it), or unknown
		}
		select {
		case o.out <- e:
		case <-ctx.Done():
			return delivered
		}
		delivered, o.last = true, e.ID
	}
}

// electionEvent decodes ev; ok is false for a closed event and for types it does not know.
func electionEvent(ev Event) (e ElectionEvent, ok bool) {
	var body struct {
		ElectionState
		At    time.Time `json:"at"`
		Owner string    `json:"owner"`
		Fence int64     `json:"fence"`
		Value string    `json:"value"`
		Gap   bool      `json:"gap"`
	}
	if ev.ID == "" || json.Unmarshal(ev.Data, &body) != nil {
		return e, false
	}
	e = ElectionEvent{ID: ev.ID, Type: ev.Type, At: body.At, Owner: body.Owner, Fence: body.Fence, Value: body.Value, Gap: body.Gap}
	switch ev.Type {
	case "state":
		st := body.ElectionState
		e.State = &st
	case "elected", "proclaimed", "resigned", "vacant":
	default:
		return e, false
	}
	return e, true
}
