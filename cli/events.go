package cli

import (
	"context"
	"io"
	"net/http"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// A lock's or a semaphore's events stream (GET /locks/{name}/events, /semaphores/{name}/events,
// without a token), which watch prints. It starts with a state event; the events after it are the changes Redis made after
// that state, in order. Nothing is stored for replay: a reconnection starts a new stream with a
// fresh state (Last-Event-ID is ignored), which is how the SDK's watchers resume too.

// streamIdle: a stream that sends nothing for this long is taken for dead (the gateway sends a
// comment line after 15 s without an event), as the SDK's watchers do.
const streamIdle = 45 * time.Second

// eventStream is one open events stream.
type eventStream struct {
	body   io.ReadCloser
	events *leasegate.EventReader
	idle   *time.Timer
	cancel context.CancelFunc
}

// openEvents opens t's events stream (a lock's or a semaphore's) through gw. A refusal is returned
// as the gateway's problem.
func (t target) openEvents(ctx context.Context, gw *leasegate.Gateway) (*eventStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		resp *http.Response
		err  error
	)
	if t.semaphore != "" {
		resp, err = gw.API.WatchSemaphore(ctx, t.semaphore, &leasegate.WatchSemaphoreParams{})
	} else {
		resp, err = gw.API.WatchLock(ctx, t.lock, &leasegate.WatchLockParams{})
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		cancel()
		return nil, newAnswer(resp, body).err()
	}
	idle := time.AfterFunc(streamIdle, cancel)
	return &eventStream{body: resp.Body, events: leasegate.NewEventReader(activity{r: resp.Body, idle: idle}), idle: idle, cancel: cancel}, nil
}

// next returns the stream's next event, or the error that ended the stream.
func (s *eventStream) next() (leasegate.Event, error) { return s.events.Next() }

// close ends the stream from this side.
func (s *eventStream) close() {
	s.idle.Stop()
	s.cancel()
	s.body.Close()
}

// activity resets idle on every read that brings bytes.
type activity struct {
	r    io.Reader
	idle *time.Timer
}

func (a activity) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.idle.Reset(streamIdle)
	}
	return n, err
}

// heldEvent is the data of a lock's or semaphore's event about holds: granted, handed-off,
// released and expired name one hold (Owner, Fence, Mode), forced the holds it removed, waiters
// and granted the line's length.
type heldEvent struct {
	Lock         string    `json:"lock"`
	At           time.Time `json:"at"`
	Owner        string    `json:"owner"`
	Fence        int64     `json:"fence"`
	Mode         string    `json:"mode"`
	Waiters      *int64    `json:"waiters"`
	HoldsRemoved int64     `json:"holds_removed"`
	Holds        []struct {
		Owner string `json:"owner"`
		Fence int64  `json:"fence"`
		Mode  string `json:"mode"`
	} `json:"holds"`
	Reason string `json:"reason"` // closed
	Detail string `json:"detail"` // closed
}
