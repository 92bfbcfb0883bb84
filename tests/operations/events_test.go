package operations

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// sseEvent is one Server-Sent Event as a client reads it.
type sseEvent struct {
	ID, Type string
	Data     map[string]any // numbers as json.Number
	At       time.Time      // when the test's reader got it
}

func (ev sseEvent) str(key string) string {
	s, _ := ev.Data[key].(string)
	return s
}

func (ev sseEvent) int(key string) int64 {
	n, ok := ev.Data[key].(json.Number)
	if !ok {
		return -1
	}
	v, _ := n.Int64()
	return v
}

// eventStream is an open GET .../events: its reader goroutine parses events onto events (closed
// when the stream ends) and counts keep-alive comments.
type eventStream struct {
	events  chan sseEvent
	header  http.Header
	cancel  context.CancelFunc
	mu      sync.Mutex
	readErr error
}

// openEvents opens the event stream at base+path (e.g. "/locks/x/events") with headers h and
// requires a 200 text/event-stream; it is closed when t ends.
func openEvents(t *testing.T, base, path string, h harness.Headers) *eventStream {
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
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s", path)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &eventStream{events: make(chan sseEvent, 100000), header: resp.Header, cancel: cancel}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		defer close(s.events)
		defer resp.Body.Close()
		s.read(bufio.NewScanner(resp.Body))
	}()
	return s
}

// read parses the stream until it ends.
func (s *eventStream) read(sc *bufio.Scanner) {
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev sseEvent
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
				s.events <- ev
			}
			ev, data = sseEvent{}, ""
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

// next returns the stream's next event, failing t when none comes within timeout or the stream
// ends.
func (s *eventStream) next(t *testing.T, timeout time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(timeout):
		require.FailNow(t, "no event", "within %v", timeout)
		return sseEvent{}
	}
}

// expect reads the next event and checks its type (and, for a hold's event, its owner).
func (s *eventStream) expect(t *testing.T, typ, owner string) sseEvent {
	t.Helper()
	ev := s.next(t, 10*time.Second)
	require.Equal(t, typ, ev.Type, "event %s: %v", ev.ID, ev.Data)
	if owner != "" {
		require.Equal(t, owner, ev.str("owner"), "%s event %s: %v", typ, ev.ID, ev.Data)
	}
	return ev
}

// ended waits for the stream to end, failing t if another event comes first.
func (s *eventStream) ended(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		require.False(t, ok, "the stream should have ended, got %s %v", ev.Type, ev.Data)
	case <-time.After(timeout):
		require.FailNow(t, "the stream did not end", "within %v", timeout)
	}
}

func TestEventsGrantHandOffExpiryForceInOrder(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	s := openEvents(t, e.Gateway.URL, "/locks/ev/events", nil)
	st := s.expect(t, "state", "")
	assert.Equal(t, "1", st.ID)
	assert.Equal(t, "ev", st.str("lock"))
	assert.Equal(t, false, st.Data["held"])
	_, err := time.Parse(time.RFC3339Nano, st.str("at"))
	require.NoError(t, err, "at is RFC 3339")

	a := e.Hold(t, e.Client, "ev", "a", 60000)
	g := s.expect(t, "granted", "a")
	assert.Equal(t, a.Int("fence"), g.int("fence"))
	assert.Equal(t, "exclusive", g.str("mode"))
	assert.Equal(t, int64(0), g.int("waiters"))
	assert.Equal(t, "2", g.ID)

	b := testkit.StartWaiter(e.Client, context.Background(), "ev", "b", 400, 20000)
	assert.Equal(t, int64(1), s.expect(t, "waiters", "").int("waiters"))

	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/ev", testkit.TokenHeader(a.Str("token")), "").Status)
	assert.Equal(t, a.Int("fence"), s.expect(t, "released", "a").int("fence"))
	h := s.expect(t, "handed-off", "b")
	gb := s.expect(t, "granted", "b")
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, got.Int("fence"), h.int("fence"))
	assert.Equal(t, got.Int("fence"), gb.int("fence"))
	assert.Greater(t, gb.int("fence"), g.int("fence"))

	// b's 400 ms lease runs out: expiry publishes nothing, the stream notices it.
	x := s.expect(t, "expired", "b")
	assert.Equal(t, gb.int("fence"), x.int("fence"))
	expiresAt, err := time.Parse(time.RFC3339Nano, got.Str("expires_at"))
	require.NoError(t, err)
	assert.WithinDuration(t, expiresAt, x.At, time.Second, "the expiry is told about when it happens")

	c := e.Hold(t, e.Client, "ev", "c", 60000)
	gc := s.expect(t, "granted", "c")
	assert.Greater(t, gc.int("fence"), gb.int("fence"))
	f := e.Client.Do(http.MethodDelete, "/locks/ev?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	forced := s.expect(t, "forced", "")
	assert.Equal(t, int64(1), forced.int("holds_removed"))
	assert.Equal(t, []any{"c"}, forced.Data["owners"])
	holds, _ := forced.Data["holds"].([]any)
	require.Len(t, holds, 1)
	assert.Equal(t, json.Number(strconv.FormatInt(c.Int("fence"), 10)), holds[0].(map[string]any)["fence"])

	prev := 0
	for _, ev := range []sseEvent{g, h, gb, x, gc, forced} {
		id, err := strconv.Atoi(ev.ID)
		require.NoError(t, err)
		assert.Greater(t, id, prev, "ids rise")
		prev = id
	}
	select {
	case ev := <-s.events:
		t.Fatalf("unexpected event %s %v", ev.Type, ev.Data)
	default:
	}
}

func TestEventsAcrossReplicas(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	s := openEvents(t, p.Gateway.URL, "/locks/x/events", nil) // replica 1 watches
	s.expect(t, "state", "")

	a := p.Hold(t, p.Client2, "x", "a", 60000) // replica 2 acts
	assert.Equal(t, a.Int("fence"), s.expect(t, "granted", "a").int("fence"))
	b := testkit.StartWaiter(p.Client, context.Background(), "x", "b", 30000, 20000) // a waiter on replica 1
	s.expect(t, "waiters", "")
	require.Equal(t, http.StatusOK, p.Client2.Do(http.MethodDelete, "/locks/x", testkit.TokenHeader(a.Str("token")), "").Status)
	s.expect(t, "released", "a")
	s.expect(t, "handed-off", "b")
	gb := s.expect(t, "granted", "b")
	got := <-b
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, got.Int("fence"), gb.int("fence"))

	// A second stream on replica 2, opened with b's token, sees the same events from its state on.
	s2 := openEvents(t, p.Gateway2.URL, "/locks/x/events", testkit.TokenHeader(got.Str("token")))
	st := s2.expect(t, "state", "")
	assert.Equal(t, "b", st.str("owner"))
	assert.Equal(t, true, st.Data["yours"], "the state is the GET body, with the token's yours")
	require.Equal(t, http.StatusOK, p.Client.Do(http.MethodDelete, "/locks/x", testkit.TokenHeader(got.Str("token")), "").Status)
	assert.Equal(t, gb.int("fence"), s.expect(t, "released", "b").int("fence"))
	assert.Equal(t, gb.int("fence"), s2.expect(t, "released", "b").int("fence"), "its own release is no loss")
}

func TestEventsLeaseHolderSeesLostWithin100msOfForce(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	a := p.Hold(t, p.Client, "job", "worker", 60000)
	s := openEvents(t, p.Gateway.URL, "/locks/job/events", testkit.TokenHeader(a.Str("token")))
	s.expect(t, "state", "worker")

	sent := time.Now()
	f := p.Client2.Do(http.MethodDelete, "/locks/job?force=true", nil, "") // an operator, on the other replica
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	s.expect(t, "forced", "")
	lost := s.expect(t, "lost", "")
	assert.Equal(t, "forced", lost.str("reason"))
	assert.Equal(t, a.Int("fence"), lost.int("fence"))
	assert.Less(t, lost.At.Sub(sent), 100*time.Millisecond, "lost within 100 ms of the force release")
	t.Logf("lost %v after the force request was sent", lost.At.Sub(sent))
	s.ended(t, 5*time.Second)
	r := p.Client.Do(http.MethodPost, "/locks/job/renew", testkit.TokenHeader(a.Str("token")), "")
	assert.Equal(t, http.StatusGone, r.Status, "and the token is gone")
}

func TestEventsLeaseHolderSeesLostOnExpiry(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	a := e.Hold(t, e.Client, "short", "worker", 300)
	s := openEvents(t, e.Gateway.URL, "/locks/short/events", testkit.TokenHeader(a.Str("token")))
	s.expect(t, "state", "worker")
	x := s.expect(t, "expired", "worker")
	lost := s.expect(t, "lost", "")
	assert.Equal(t, "expired", lost.str("reason"))
	assert.Equal(t, x.int("fence"), lost.int("fence"))
	s.ended(t, 5*time.Second)
}

func TestEventsSharedHoldsAndSemaphores(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	s := openEvents(t, e.Gateway.URL, "/locks/rw/events", nil)
	s.expect(t, "state", "")
	for _, r := range []string{"r1", "r2"} {
		res := e.Client.Do(http.MethodPost, "/locks/rw", nil, `{"owner":"`+r+`","mode":"shared","ttl_ms":300}`)
		require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
		assert.Equal(t, "shared", s.expect(t, "granted", r).str("mode"))
	}
	// Both readers run out; each expiry is told once.
	owners := []string{s.expect(t, "expired", "").str("owner"), s.expect(t, "expired", "").str("owner")}
	assert.ElementsMatch(t, []string{"r1", "r2"}, owners)

	sem := openEvents(t, e.Gateway.URL, "/semaphores/pool/events", nil)
	st := sem.expect(t, "state", "")
	assert.Equal(t, "pool", st.str("lock"))
	assert.Equal(t, "pool", st.str("name"), "the GET /semaphores body")
	p1 := e.Client.Do(http.MethodPost, "/semaphores/pool", nil, `{"owner":"w1","permits":2}`)
	require.Equal(t, http.StatusCreated, p1.Status)
	g := sem.expect(t, "granted", "w1")
	assert.Nil(t, g.Data["mode"], "a permit has no mode")
	f := e.Client.Do(http.MethodDelete, "/semaphores/pool?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	assert.Equal(t, int64(1), sem.expect(t, "forced", "").int("holds_removed"))
}

func TestEventsReconnectStartsAFreshStream(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	a := e.Hold(t, e.Client, "re", "a", 60000)
	s := openEvents(t, e.Gateway.URL, "/locks/re/events", nil)
	s.expect(t, "state", "a")
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/re", testkit.TokenHeader(a.Str("token")), "").Status)
	rel := s.expect(t, "released", "a")
	s.cancel()

	// Ids are numbers within one stream; Last-Event-ID resumes nothing: a fresh state instead.
	s2 := openEvents(t, e.Gateway.URL, "/locks/re/events", harness.Headers{"Last-Event-ID": rel.ID})
	st := s2.expect(t, "state", "")
	assert.Equal(t, "1", st.ID)
	assert.Equal(t, false, st.Data["held"])
}

func TestEventsBadInput(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	other := e.Hold(t, e.Client, "other", "a", 60000)
	sem := e.Client.Do(http.MethodPost, "/semaphores/s", nil, `{"owner":"a","permits":1}`)
	require.Equal(t, http.StatusCreated, sem.Status)

	for _, c := range []struct {
		path, token string
		status      int
		typ         string
	}{
		{"/locks/x/events", other.Str("token"), http.StatusBadRequest, "urn:leasegate:problem:invalid-lease-token"},
		{"/locks/x/events", "not-a-token", http.StatusBadRequest, "urn:leasegate:problem:invalid-lease-token"},
		{"/semaphores/other/events", other.Str("token"), http.StatusBadRequest, "urn:leasegate:problem:invalid-lease-token"},
		{"/locks/s/events", sem.Str("token"), http.StatusBadRequest, "urn:leasegate:problem:invalid-lease-token"},
		{"/locks/bad%20name/events", "", http.StatusBadRequest, "urn:leasegate:problem:invalid-lock-name"},
	} {
		var h harness.Headers
		if c.token != "" {
			h = testkit.TokenHeader(c.token)
		}
		r := e.Client.Do(http.MethodGet, c.path, h, "")
		assert.Equal(t, c.status, r.Status, "%s: %s", c.path, r.Body)
		assert.Equal(t, c.typ, r.Str("type"), c.path)
	}
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/other", testkit.TokenHeader(other.Str("token")), "").Status)
	r := e.Client.Do(http.MethodGet, "/locks/other/events", testkit.TokenHeader(other.Str("token")), "")
	assert.Equal(t, http.StatusGone, r.Status, "a lease that no longer holds has nothing to lose: %s", r.Body)
	assert.Equal(t, "urn:leasegate:problem:lease-gone", r.Str("type"))
}

// TestEventsUnwatchedLockPublishesNothing checks that events cost nothing while nobody listens:
// a plain acquire and release publish nothing, a watched lock publishes its events on the
// replicas' existing channels (no subscription per stream), and once the last stream is gone the
// lock publishes nothing again.
func TestEventsUnwatchedLockPublishesNothing(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads INFO commandstats and PUBSUB of the one Redis")
	e := testkit.NewEnv(t, nil)
	cycle := func() {
		t.Helper()
		a := e.Hold(t, e.Client, "quiet", "a", 60000)
		require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/quiet", testkit.TokenHeader(a.Str("token")), "").Status)
	}
	cycle() // scripts loaded
	channels := e.Redis.MustDo(t, "PUBSUB", "CHANNELS", e.Gateway.KeyPrefix+"*")

	e.Redis.MustDo(t, "CONFIG", "RESETSTAT")
	cycle()
	assert.Equal(t, int64(0), publishes(t, e), "an unwatched lock publishes nothing")

	var streams []*eventStream
	for range 3 {
		s := openEvents(t, e.Gateway.URL, "/locks/quiet/events", nil)
		s.expect(t, "state", "")
		streams = append(streams, s)
	}
	assert.Equal(t, channels, e.Redis.MustDo(t, "PUBSUB", "CHANNELS", e.Gateway.KeyPrefix+"*"), "no subscription per stream")
	e.Redis.MustDo(t, "CONFIG", "RESETSTAT")
	cycle()
	for _, s := range streams {
		s.expect(t, "granted", "a")
		s.expect(t, "released", "a")
	}
	assert.Equal(t, int64(2), publishes(t, e), "one message per event to the one watching replica")

	for _, s := range streams {
		s.cancel()
	}
	watch := e.Gateway.KeyPrefix + "{quiet}:watch"
	harness.Eventually(t, 5*time.Second, "the watch key gone with the last stream", func() bool {
		return e.Redis.MustDo(t, "EXISTS", watch) == "0"
	})
	e.Redis.MustDo(t, "CONFIG", "RESETSTAT")
	cycle()
	a := e.Hold(t, e.Client, "quiet", "a", 60000) // renewals and re-entries tell watchers their TTLs
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodPost, "/locks/quiet/renew", testkit.TokenHeader(a.Str("token")), `{"ttl_ms":500}`).Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodPost, "/locks/quiet", testkit.TokenHeader(a.Str("token")), `{"owner":"a","ttl_ms":60000}`).Status)
	assert.Equal(t, int64(0), publishes(t, e), "nobody watches any more")
}

// publishes counts PUBLISH and SPUBLISH calls since the last CONFIG RESETSTAT (scripts' included).
func publishes(t *testing.T, e *testkit.Env) int64 {
	t.Helper()
	var n int64
	for _, line := range strings.Split(e.Redis.MustDo(t, "INFO", "commandstats"), "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_publish" && name != "cmdstat_spublish") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, line)
		n += v
	}
	return n
}

func TestEventsEndCleanlyOnShutdown(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	gw := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	s := openEvents(t, gw.URL, "/locks/x/events", nil)
	s.expect(t, "state", "")
	start := time.Now()
	require.NoError(t, gw.Stop(), "a clean exit (SIGTERM) with a stream open")
	assert.Less(t, time.Since(start), 10*time.Second, "the open stream does not hold the shutdown up")
	s.ended(t, 5*time.Second)
}
