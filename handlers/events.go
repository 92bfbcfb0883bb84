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

// stream answers ref's live events as Server-Sent Events until the client leaves, the stream's
// lease is lost (its last event), the gateway shuts down, or the gateway closes it (a "closed"
// event, its last: the request's credentials stopped allowing it, or it reached its lifetime; see
// Streams). Each event has an id (its number in this stream, from 1), a type and one line of JSON
// data; a comment line goes out after keepAliveEvery without an event. Problems before the stream
// starts (a bad name or token, a lease already gone, Redis down, too many streams) are answered as
// problem+json.
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
	rc := http.NewResponseController(w)
	// A client that stops reading holds a Write up to eventWriteWindow: when the gateway shuts
	// down, a write deadline of now makes it return at once, so Shutdown does not wait for it.
	handlerDone, unblocked := make(chan struct{}), make(chan struct{})
	defer func() { close(handlerDone); <-unblocked }()
	go func() {
		defer close(unblocked)
		select {
		case <-st.Done():
			_ = rc.SetWriteDeadline(time.Now())
		case <-handlerDone:
		}
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	reauthorize := reauthorizer(r.Context())
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
	for id := 1; ; {
		next, cancel := context.WithTimeout(r.Context(), wake)
		ev, err := st.Next(next)
		cancel()
		buf.Reset()
		last := false
		now := time.Now()
		if now.Sub(checked) >= wake {
			checked = now
			if reason, why := streamEnd(reauthorize, endOfLife, now); why != nil {
				writeData(&buf, id, "closed", api.ClosedEvent{Lock: ref.Name, At: api.Timestamp(now), Reason: reason, Detail: why.Error()})
				h.log.Info("event stream closed", "request_id", requestIDFrom(r.Context()), "lock", ref.Name, "reason", reason, "detail", why.Error())
				err, last = nil, true
			}
		}
		switch {
		case last:
		case err == nil:
			writeEvent(&buf, id, ref, ev)
			id++
			last = ev.Type == lockcore.EventLost
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
		case <-st.Done(): // the goroutine above may have set its deadline before this one
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

// writeEvent renders ev as one Server-Sent Event into buf.
func writeEvent(buf *bytes.Buffer, id int, ref lockcore.Ref, ev lockcore.Event) {
	writeData(buf, id, string(ev.Type), eventBody(ref, ev))
}

// writeData renders one Server-Sent Event of type typ with data as its JSON line into buf.
func writeData(buf *bytes.Buffer, id int, typ string, data any) {
	buf.WriteString("id: " + strconv.Itoa(id) + "\nevent: " + typ + "\ndata: ")
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
