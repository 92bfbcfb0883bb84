package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// SSEEvent is one Server-Sent Event as a client reads it.
type SSEEvent struct {
	ID, Type string
	Data     map[string]any // numbers as json.Number
	At       time.Time      // when the test's reader got it
}

func (ev SSEEvent) Str(key string) string {
	s, _ := ev.Data[key].(string)
	return s
}

func (ev SSEEvent) Int(key string) int64 {
	n, ok := ev.Data[key].(json.Number)
	if !ok {
		return -1
	}
	v, _ := n.Int64()
	return v
}

// EventStream is an open GET .../events: its reader goroutine parses events onto events (closed
// when the stream ends) and counts keep-alive comments.
type EventStream struct {
	Events  chan SSEEvent
	Header  http.Header
	cancel  context.CancelFunc
	mu      sync.Mutex
	readErr error
}

// OpenEvents opens the event stream at base+path (e.g. "/locks/x/events") with headers h and
// requires a 200 text/event-stream; it is closed when t ends.
func OpenEvents(t *testing.T, base, path string, h harness.Headers) *EventStream {
	t.Helper()
	return openEvents(t, base, path, h, 100000, true)
}

// OpenFewEvents is OpenEvents for a stream the test reads a few events of (it buffers 16): for
// tests that open many streams.
func OpenFewEvents(t *testing.T, base, path string, h harness.Headers) *EventStream {
	t.Helper()
	return openEvents(t, base, path, h, 16, true)
}

// OpenEventsIfAccepted is OpenFewEvents for a stream the gateway may refuse: nil then.
func OpenEventsIfAccepted(t *testing.T, base, path string, h harness.Headers) *EventStream {
	t.Helper()
	return openEvents(t, base, path, h, 16, false)
}

func openEvents(t *testing.T, base, path string, h harness.Headers, buffer int, must bool) *EventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	require.NoError(t, err)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		resp.Body.Close()
		if !must {
			return nil
		}
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s", path)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &EventStream{Events: make(chan SSEEvent, buffer), Header: resp.Header, cancel: cancel}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		defer close(s.Events)
		defer resp.Body.Close()
		s.read(bufio.NewScanner(resp.Body))
	}()
	return s
}

// read parses the stream until it ends.
func (s *EventStream) read(sc *bufio.Scanner) {
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev SSEEvent
	var data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Type != "" {
				dec := json.NewDecoder(strings.NewReader(data))
				dec.UseNumber()
				ev.Data = map[string]any{}
				_ = dec.Decode(&ev.Data)
				ev.At = time.Now()
				s.Events <- ev
			}
			ev, data = SSEEvent{}, ""
		case strings.HasPrefix(line, "id: "):
			ev.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.Type = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	s.mu.Lock()
	s.readErr = sc.Err()
	s.mu.Unlock()
}

// Close ends the stream from the client's side.
func (s *EventStream) Close() { s.cancel() }

// Next returns the stream's next event, failing t when none comes within timeout or the stream
// ends.
func (s *EventStream) Next(t *testing.T, timeout time.Duration) SSEEvent {
	t.Helper()
	select {
	case ev, ok := <-s.Events:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(timeout):
		require.FailNow(t, "no event", "within %v", timeout)
		return SSEEvent{}
	}
}

// Expect reads the next event and checks its type (and, for a hold's event, its owner).
func (s *EventStream) Expect(t *testing.T, typ, owner string) SSEEvent {
	t.Helper()
	ev := s.Next(t, 10*time.Second)
	require.Equal(t, typ, ev.Type, "event %s: %v", ev.ID, ev.Data)
	if owner != "" {
		require.Equal(t, owner, ev.Str("owner"), "%s event %s: %v", typ, ev.ID, ev.Data)
	}
	return ev
}

// Ended waits for the stream to end, failing t if another event comes first.
func (s *EventStream) Ended(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case ev, ok := <-s.Events:
		require.False(t, ok, "the stream should have ended, got %s %v", ev.Type, ev.Data)
	case <-time.After(timeout):
		require.FailNow(t, "the stream did not end", "within %v", timeout)
	}
}

// NoEventOf fails t if s sends an event of one of types within d (other events are skipped).
func (s *EventStream) NoEventOf(t *testing.T, d time.Duration, types ...string) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-s.Events:
			require.True(t, ok, "the stream ended")
			for _, typ := range types {
				require.NotEqual(t, typ, ev.Type, "event %s: %v", ev.ID, ev.Data)
			}
		case <-deadline:
			return
		}
	}
}
