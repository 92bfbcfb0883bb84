package handlers

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/leasegate/leasegate/lockcore"
)

// acquireLongPoll runs a waiting acquire. When it has to queue, the connection is parked (see
// Parking) and this handler returns at once; the answer is written when the wait ends. Where the
// connection cannot be hijacked (not HTTP/1), the wait holds the handler as any request would.
func (h *lockHandlers) acquireLongPoll(w http.ResponseWriter, r *http.Request, name string, req lockcore.AcquireRequest) {
	queued := make(chan struct{})
	req.Queued = func() { close(queued) }
	call := &waitCall{done: make(chan struct{})}
	cancel := h.locker.StartAcquire(req, call.finish)
	// Until the request is parked, the server notices a client that leaves.
	stopFollowing := context.AfterFunc(r.Context(), func() { cancel(context.Canceled) })

	select {
	case <-call.done: // checked first: a wait can be queued and done by the time we look
		stopFollowing()
		h.answerOnServer(w, r, name, call)
		return
	default:
	}
	select {
	case <-call.done:
		stopFollowing()
		h.answerOnServer(w, r, name, call)
		return
	case <-queued:
	}
	h.parking.count(1) // before the hijack, so that a shutdown's Parking.Wait cannot miss it
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		h.parking.count(-1)
		<-call.done
		stopFollowing()
		h.answerOnServer(w, r, name, call)
		return
	}
	// If the client left before the hijack, cancel has run and the wait is ending: answer drops it.
	stopFollowing()
	pc := h.parking.park(conn, buf.Reader, !r.Close, func() { cancel(context.Canceled) })
	entry, id := detachAccessLog(r.Context()), requestIDFrom(r.Context())
	http10 := r.ProtoMajor == 1 && r.ProtoMinor == 0
	answer := func() { h.answerParked(pc, entry, id, name, http10, call.g, call.err) }
	if !call.then(answer) {
		answer() // the wait ended while we parked
	}
}

// answerOnServer answers a long-poll that did not park, on its server goroutine. A grant that came
// after its client left is given back at once.
func (h *lockHandlers) answerOnServer(w http.ResponseWriter, r *http.Request, name string, call *waitCall) {
	if call.err == nil && r.Context().Err() != nil {
		h.releaseAbandoned(requestIDFrom(r.Context()), name, call.g)
		setStatus(r.Context(), statusClientClosed)
		return
	}
	h.writeAcquire(r.Context(), w, name, call.g, call.err)
}

// releaseAbandoned releases a grant nobody will use: its client left, or never got the answer.
func (h *lockHandlers) releaseAbandoned(id, name string, g lockcore.Grant) {
	if _, err := h.locker.Release(context.Background(), name, g.Token); err != nil {
		h.log.Warn("releasing the grant of a client that left failed", "request_id", id, "lock", name, "err", err)
	}
}

// waitCall is the outcome of a StartAcquire, for a handler that may return before it is in.
type waitCall struct {
	done chan struct{} // closed when the result is in
	mu   sync.Mutex
	g    lockcore.Grant
	err  error
	next func() // runs after the result is in, on the goroutine that delivered it
	over bool
}

func (c *waitCall) finish(g lockcore.Grant, err error) {
	c.mu.Lock()
	c.g, c.err, c.over = g, err, true
	next := c.next
	c.mu.Unlock()
	close(c.done)
	if next != nil {
		next()
	}
}

// then arranges for f to run once the result is in; it reports false, without arranging anything,
// when the result is already in.
func (c *waitCall) then(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return false
	}
	c.next = f
	return true
}

// answerParked answers a parked acquire on its hijacked connection and logs the request. A grant
// whose client went away is released at once, so that it passes to the next waiter.
func (h *lockHandlers) answerParked(pc *parkedConn, entry *accessEntry, id, name string, http10 bool, g lockcore.Grant, err error) {
	defer func() { // this runs on lockcore's goroutine, which no recoverer guards
		if v := recover(); v != nil {
			h.log.Error("panic", "request_id", id, "panic", v, "stack", string(debug.Stack()))
			pc.drop()
			entry.write(http.StatusInternalServerError)
		}
	}()
	if lost := pc.stop(); lost || errors.Is(err, context.Canceled) {
		if err == nil {
			h.releaseAbandoned(id, name, g)
		}
		pc.drop()
		entry.write(statusClientClosed)
		return
	}
	resp := &rawResponse{header: http.Header{requestIDHeader: {id}}, http10: http10}
	h.writeAcquire(context.WithValue(context.Background(), requestIDKey, id), resp, name, g, err)
	if !pc.send(resp.render) && err == nil && !g.Reentered {
		h.releaseAbandoned(id, name, g) // the client never learnt of its grant
	}
	entry.write(resp.status)
}

// writeAcquire answers an acquire: 201 for a new grant, 200 for a re-entry, else the error's problem.
func (h *lockHandlers) writeAcquire(ctx context.Context, w http.ResponseWriter, name string, g lockcore.Grant, err error) {
	if err != nil {
		writeProblem(ctx, w, h.log, err)
		return
	}
	status := http.StatusCreated
	if g.Reentered {
		status = http.StatusOK
	} else {
		w.Header().Set("Location", "/locks/"+name)
	}
	writeJSON(w, status, grantBody(g))
}

// rawResponse collects an answer to write on a hijacked connection as an HTTP/1.1 response.
type rawResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
	http10 bool // the request was HTTP/1.0: a kept connection says so ("Connection: keep-alive")
}

func (r *rawResponse) Header() http.Header { return r.header }

func (r *rawResponse) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *rawResponse) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// render returns the response's bytes; closing adds "Connection: close".
func (r *rawResponse) render(closing bool) []byte {
	r.WriteHeader(http.StatusOK)
	r.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	r.header.Set("Content-Length", strconv.Itoa(r.body.Len()))
	switch {
	case closing:
		r.header.Set("Connection", "close")
	case r.http10:
		r.header.Set("Connection", "keep-alive")
	}
	var b bytes.Buffer
	b.Grow(256 + r.body.Len())
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(r.status))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(r.status))
	b.WriteString("\r\n")
	_ = r.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(r.body.Bytes())
	return b.Bytes()
}
