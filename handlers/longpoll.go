package handlers

import (
	"bytes"
	"context"
	"errors"
	"net/http"
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
	case <-call.done:
		stopFollowing()
		h.writeAcquire(r.Context(), w, name, call.g, call.err)
		return
	case <-queued:
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		<-call.done
		stopFollowing()
		h.writeAcquire(r.Context(), w, name, call.g, call.err)
		return
	}
	// If the client left before the hijack, cancel has run and the wait is ending: answer drops it.
	stopFollowing()
	pc := h.parking.park(conn, buf.Reader, !r.Close, func() { cancel(context.Canceled) })
	entry, id := detachAccessLog(r.Context()), requestIDFrom(r.Context())
	answer := func() { h.answerParked(pc, entry, id, name, call.g, call.err) }
	if !call.then(answer) {
		answer() // the wait ended while we parked
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
func (h *lockHandlers) answerParked(pc *parkedConn, entry *accessEntry, id, name string, g lockcore.Grant, err error) {
	if lost := pc.stop(); lost || errors.Is(err, context.Canceled) {
		if err == nil {
			if _, relErr := h.locker.Release(context.Background(), name, g.Token); relErr != nil {
				h.log.Warn("releasing the grant of a client that left failed", "request_id", id, "lock", name, "err", relErr)
			}
		}
		pc.drop()
		entry.write(statusClientClosed)
		return
	}
	resp := &rawResponse{header: http.Header{requestIDHeader: {id}}}
	h.writeAcquire(context.WithValue(context.Background(), requestIDKey, id), resp, name, g, err)
	pc.send(resp.render)
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
	if closing {
		r.header.Set("Connection", "close")
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
