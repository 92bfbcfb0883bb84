package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

const (
	// keepAliveEvery: a stream with nothing to say for this long sends a comment line, so that
	// proxies and clients see it alive.
	keepAliveEvery = 15 * time.Second
	// eventWriteWindow bounds each write of a stream (the server's WriteTimeout would end the
	// stream otherwise): a client that reads nothing for this long is dropped.
	eventWriteWindow = 30 * time.Second
)

// events handles GET /locks/{name}/events: the lock's live events (see lockcore.Stream).
func (h *lockHandlers) events(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	h.stream(w, r, lockcore.LockRef(name))
}

// semaphoreEvents handles GET /semaphores/{name}/events.
func (h *lockHandlers) semaphoreEvents(w http.ResponseWriter, r *http.Request) {
	name, err := lockName(r)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	h.stream(w, r, lockcore.SemaphoreRef(name))
}

// stream answers ref's live events as Server-Sent Events (see serveEvents) until the client
// leaves, the stream's lease is lost (its last event), the gateway shuts down, or the gateway
// closes it. Each event has an id (its number in this stream, from 1), a type and one line of JSON
// data. Problems before the stream starts (a bad name or token, a lease already gone, Redis down,
// too many streams) are answered as problem+json.
func (h *lockHandlers) stream(w http.ResponseWriter, r *http.Request, ref lockcore.Ref) {
	admitted, err := h.streams.admit(r, h.quotas)
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	defer admitted()
	st, err := h.locker.Watch(r.Context(), ref, r.Header.Get(leaseTokenHeader))
	if err != nil {
		writeError(w, r, h.log, err)
		return
	}
	defer st.Close()
	h.serveEvents(w, r, &lockEvents{st: st, ref: ref, id: 1})
}

// eventSource is one open stream of events, as serveEvents writes them out.
type eventSource interface {
	// next waits for the next event until ctx ends and renders it into buf; last says the stream
	// ends after it. Its errors are the stream's (ctx's error when nothing came in time).
	next(ctx context.Context, buf *bytes.Buffer) (last bool, err error)
	// closed renders the "closed" event that ends the stream for reason (see api.ClosedEvent).
	closed(buf *bytes.Buffer, at time.Time, reason, detail string)
	// done is closed once the Service closes.
	done() <-chan struct{}
}

// serveEvents writes src's events as Server-Sent Events until the client leaves, src's last event,
// the gateway shuts down, or the gateway closes the stream (a "closed" event, its last: the
// request's credentials stopped allowing it, or it reached its lifetime; see Streams). A comment
// line goes out after keepAliveEvery without an event.
func (h *lockHandlers) serveEvents(w http.ResponseWriter, r *http.Request, src eventSource) {
	rc := http.NewResponseController(w)
	// A client that stops reading holds a Write up to eventWriteWindow: when the gateway shuts
	// down, a write deadline of now makes it return at once, so Shutdown does not wait for it.
	handlerDone, unblocked := make(chan struct{}), make(chan struct{})
	defer func() { close(handlerDone); <-unblocked }()
	go func() {
		defer close(unblocked)
		select {
		case <-src.done():
			_ = rc.SetWriteDeadline(time.Now())
		case <-handlerDone:
		}
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	// The headers go out at once: a stream resumed with nothing new to send would otherwise keep
	// its client waiting for them until its first event or keep-alive.
	if err := rc.Flush(); err != nil {
		return
	}
	reauthorize := reauthorizer(r)
	var endOfLife time.Time
	if h.streams.Lifetime > 0 {
		endOfLife = time.Now().Add(h.streams.Lifetime)
	}
	// wake is how long one wait for an event lasts: the stream looks at its credentials and its
	// lifetime in between.
	wake := keepAliveEvery
	if reauthorize != nil || !endOfLife.IsZero() {
		wake = min(reauthorizeEvery, wake)
	}
	var buf bytes.Buffer
	wrote, checked := time.Now(), time.Now()
	for {
		buf.Reset()
		next, cancel := context.WithTimeout(r.Context(), wake)
		last, err := src.next(next, &buf)
		cancel()
		now := time.Now()
		if now.Sub(checked) >= wake {
			checked = now
			if reason, why := streamEnd(reauthorize, endOfLife, now); why != nil {
				buf.Reset()
				src.closed(&buf, now, reason, why.Error())
				h.log.Info("event stream closed", "request_id", requestIDFrom(r.Context()), "path", r.URL.Path, "reason", reason, "detail", why.Error())
				err, last = nil, true
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			if now.Sub(wrote) < keepAliveEvery {
				continue
			}
			buf.WriteString(": keep-alive\n\n")
		default: // the client left, or the gateway shuts down (its clients reconnect elsewhere)
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteWindow))
		select {
		case <-src.done(): // the goroutine above may have set its deadline before this one
			return
		default:
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		wrote = now
		if err := rc.Flush(); err != nil || last {
			return
		}
	}
}

// lockEvents is a lock's (or semaphore's) live events as an eventSource, numbered from id.
type lockEvents struct {
	st  *lockcore.Stream
	ref lockcore.Ref
	id  int
}

func (e *lockEvents) next(ctx context.Context, buf *bytes.Buffer) (bool, error) {
	ev, err := e.st.Next(ctx)
	if err != nil {
		return false, err
	}
	writeEvent(buf, e.id, e.ref, ev)
	e.id++
	return ev.Type == lockcore.EventLost, nil
}

func (e *lockEvents) closed(buf *bytes.Buffer, at time.Time, reason, detail string) {
	writeData(buf, e.id, "closed", api.ClosedEvent{Lock: e.ref.Name, At: api.Timestamp(at), Reason: reason, Detail: detail})
}

func (e *lockEvents) done() <-chan struct{} { return e.st.Done() }

// writeEvent renders ev as one Server-Sent Event into buf.
func writeEvent(buf *bytes.Buffer, id int, ref lockcore.Ref, ev lockcore.Event) {
	writeData(buf, id, string(ev.Type), eventBody(ref, ev))
}

// writeData renders one Server-Sent Event of type typ with data as its JSON line into buf.
func writeData(buf *bytes.Buffer, id int, typ string, data any) {
	writeSSE(buf, strconv.Itoa(id), typ, data)
}

// writeSSE renders one Server-Sent Event with id (none when "") into buf.
func writeSSE(buf *bytes.Buffer, id, typ string, data any) {
	if id != "" {
		buf.WriteString("id: " + id + "\n")
	}
	buf.WriteString("event: " + typ + "\ndata: ")
	_ = json.NewEncoder(buf).Encode(data) // one line, with its newline
	buf.WriteString("\n")
}

// eventBody is the data of ev, an event of ref.
func eventBody(ref lockcore.Ref, ev lockcore.Event) any {
	at := api.Timestamp(ev.At)
	mode := func(m lockcore.Mode) string {
		if ref.Kind == lockcore.KindSemaphore {
			return "" // a semaphore's permits have no mode
		}
		return string(m)
	}
	switch ev.Type {
	case lockcore.EventState:
		if ref.Kind == lockcore.KindSemaphore {
			return api.SemaphoreStateEvent{SemaphoreState: semaphoreStateBody(ref.Name, ev.State), Lock: ref.Name, At: at}
		}
		return api.LockStateEvent{LockState: lockStateBody(ref.Name, ev.State), At: at}
	case lockcore.EventWaiters:
		return api.WaitersEvent{Lock: ref.Name, At: at, Waiters: ev.Waiters}
	case lockcore.EventForced:
		body := api.ForcedEvent{Lock: ref.Name, At: at, Owners: []string{}, HoldsRemoved: int64(len(ev.Holds)),
			Holds: make([]api.ForcedHold, 0, len(ev.Holds))}
		seen := map[string]bool{}
		for _, h := range ev.Holds {
			body.Holds = append(body.Holds, api.ForcedHold{Owner: h.Owner, Fence: h.Fence, Mode: mode(h.Mode)})
			if !seen[h.Owner] {
				seen[h.Owner] = true
				body.Owners = append(body.Owners, h.Owner)
			}
		}
		return body
	case lockcore.EventLost:
		return api.LostEvent{Lock: ref.Name, At: at, Fence: ev.Fence, Reason: ev.Reason}
	}
	body := api.HoldEvent{Lock: ref.Name, At: at, Owner: ev.Hold.Owner, Fence: ev.Hold.Fence, Mode: mode(ev.Hold.Mode)}
	if ev.Type == lockcore.EventGranted {
		body.Waiters = ptr(ev.Waiters)
	}
	return body
}
