package tests

// Connection-level tests of parked long-polls: a waiting acquire that has to queue hands its
// connection to the gateway's Parking, which answers it when the wait ends and then gives the
// connection back to the HTTP server for the client's next request. These tests drive raw TCP
// connections, so that what happens to the connection itself (keep-alive, pipelining, close) is
// visible.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/tests/harness"
)

// rawReq is one request to write by hand on a rawConn.
type rawReq struct {
	method, path string
	header       harness.Headers
	body         string
	close        bool // send "Connection: close"
}

func (r rawReq) build(host string) (*http.Request, error) {
	req, err := http.NewRequest(r.method, "http://"+host+r.path, strings.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	req.Close = r.close
	return req, nil
}

// rawResp is a response read from a rawConn.
type rawResp struct {
	*harness.Response
	// Close reports that the response said "Connection: close" (http.ReadResponse removes that
	// header and reports it here).
	Close bool
}

// rawConn is one client TCP connection to a gateway, driven by hand: requests are written as
// bytes and responses read in order. Safe for use by one goroutine at a time.
type rawConn struct {
	conn net.Conn
	br   *bufio.Reader
	host string
}

// dialRaw connects to gw. Every read and write on the connection must be done within timeout,
// so a gateway that never answers fails a test instead of hanging it.
func dialRaw(gw *harness.Gateway, timeout time.Duration) (*rawConn, error) {
	host := strings.TrimPrefix(gw.URL, "http://")
	conn, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &rawConn{conn: conn, br: bufio.NewReader(conn), host: host}, nil
}

// mustDialRaw is dialRaw for the test's goroutine; the connection is closed when t ends.
func mustDialRaw(t *testing.T, gw *harness.Gateway, timeout time.Duration) *rawConn {
	t.Helper()
	c, err := dialRaw(gw, timeout)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.conn.Close() })
	return c
}

// send writes reqs back to back with one write, as a pipelining client does.
func (c *rawConn) send(reqs ...rawReq) error {
	var b bytes.Buffer
	for _, r := range reqs {
		req, err := r.build(c.host)
		if err != nil {
			return err
		}
		if err := req.Write(&b); err != nil {
			return err
		}
	}
	_, err := c.conn.Write(b.Bytes())
	return err
}

// read reads the response to r, the oldest request on the connection not yet answered, and
// checks it against openapi.yaml.
func (c *rawConn) read(r rawReq) (*rawResp, error) {
	req, err := r.build(c.host)
	if err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the response: %w", r.method, r.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the body: %w", r.method, r.path, err)
	}
	out := &rawResp{Response: &harness.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, Close: resp.Close}
	if err := checkAgainstSpec(r, out.Response); err != nil {
		return out, err
	}
	return out, nil
}

// roundTrip sends r and reads its response.
func (c *rawConn) roundTrip(r rawReq) (*rawResp, error) {
	if err := c.send(r); err != nil {
		return nil, err
	}
	return c.read(r)
}

func (c *rawConn) mustRead(t *testing.T, r rawReq) *rawResp {
	t.Helper()
	resp, err := c.read(r)
	require.NoError(t, err)
	return resp
}

func (c *rawConn) mustRoundTrip(t *testing.T, r rawReq) *rawResp {
	t.Helper()
	require.NoError(t, c.send(r))
	return c.mustRead(t, r)
}

// checkAgainstSpec checks a response read from a raw connection against openapi.yaml, as
// harness.Client does for its own responses.
func checkAgainstSpec(r rawReq, resp *harness.Response) error {
	req, err := r.build("127.0.0.1:8080")
	if err != nil {
		return err
	}
	return harness.CheckResponse(req, r.body, resp)
}

// waitReq is a waiting acquire carrying request ID id.
func waitReq(lock, owner, id string, ttlMs, waitMs int64) rawReq {
	return rawReq{method: http.MethodPost, path: "/locks/" + lock, header: harness.Headers{"X-Request-Id": id},
		body: waitBody(owner, ttlMs, waitMs)}
}

// accessLogLines returns the gateway's access-log lines (msg "request") for request ID id.
func accessLogLines(gw *harness.Gateway, id string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(gw.Logs(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if m["msg"] == "request" && m["request_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

func TestParkedLongPollKeepsItsConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "kept", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	wait := waitReq("kept", "parked", "kept-wait-1", 30000, 10000)
	require.NoError(t, c.send(wait))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "kept") == 1 })
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/kept", tokenHeader(holder.Str("token")), "").Status)

	got := c.mustRead(t, wait)
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "kept", got.Str("lock"))
	assert.Equal(t, "parked", got.Str("owner"))
	assert.Greater(t, got.Int("fence"), holder.Int("fence"), "the waiter's fence follows the holder's")
	token := got.Str("token")
	require.NotEmpty(t, token)
	assert.Equal(t, "/locks/kept", got.Header.Get("Location"))
	assert.Equal(t, "kept-wait-1", got.Header.Get("X-Request-Id"))
	assert.Equal(t, "application/json", got.Header.Get("Content-Type"))
	assert.NotEmpty(t, got.Header.Get("Date"))
	assert.False(t, got.Close, "the answer must not close a keep-alive connection")
	assert.Empty(t, got.Header.Values("Connection"))

	// The same connection serves the next requests: it was handed back to the server.
	inspect := rawReq{method: http.MethodGet, path: "/locks/kept", header: harness.Headers{"Lease-Token": token, "X-Request-Id": "kept-inspect-2"}}
	st := c.mustRoundTrip(t, inspect)
	require.Equal(t, http.StatusOK, st.Status, string(st.Body))
	assert.Equal(t, "kept-inspect-2", st.Header.Get("X-Request-Id"))
	assert.Equal(t, true, st.JSON()["held"])
	assert.Equal(t, "parked", st.Str("owner"))
	assert.Equal(t, true, st.JSON()["yours"])
	assert.Equal(t, got.Int("fence"), st.Int("fence"))
	assert.False(t, st.Close)

	release := rawReq{method: http.MethodDelete, path: "/locks/kept", header: harness.Headers{"Lease-Token": token}}
	rel := c.mustRoundTrip(t, release)
	require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
	assert.Equal(t, true, rel.JSON()["released"])
	assert.Equal(t, false, e.client.Do(http.MethodGet, "/locks/kept", nil, "").JSON()["held"])
}

// TestAnsweredConnectionOutlivesTheHeaderTimeout: after a parked answer, the connection waits for
// the client's next request as an idle keep-alive connection does (2 min), not only the 5 s a
// server gives a new connection to send its headers.
func TestAnsweredConnectionOutlivesTheHeaderTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "idle", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	wait := waitReq("idle", "parked", "idle-wait-1", 30000, 10000)
	require.NoError(t, c.send(wait))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "idle") == 1 })
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/idle", tokenHeader(holder.Str("token")), "").Status)
	got := c.mustRead(t, wait)
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))

	<-time.After(6 * time.Second) // the idle period under test: longer than the 5 s header timeout
	rel := c.mustRoundTrip(t, rawReq{method: http.MethodDelete, path: "/locks/idle", header: harness.Headers{"Lease-Token": got.Str("token")}})
	require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
	assert.Equal(t, true, rel.JSON()["released"])
}

func TestParkedLongPollServesAPipelinedRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "pipe", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	// Both requests go in one write, before anything is read: the inspect is in the server's
	// read buffer when the waiting acquire parks.
	wait := waitReq("pipe", "parked", "pipe-wait-1", 30000, 10000)
	inspect := rawReq{method: http.MethodGet, path: "/locks/pipe", header: harness.Headers{"X-Request-Id": "pipe-inspect-2"}}
	require.NoError(t, c.send(wait, inspect))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "pipe") == 1 })
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/pipe", tokenHeader(holder.Str("token")), "").Status)

	got := c.mustRead(t, wait)
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "pipe-wait-1", got.Header.Get("X-Request-Id"))
	assert.Equal(t, "parked", got.Str("owner"))
	assert.False(t, got.Close)

	st := c.mustRead(t, inspect)
	require.Equal(t, http.StatusOK, st.Status, string(st.Body))
	assert.Equal(t, "pipe-inspect-2", st.Header.Get("X-Request-Id"))
	assert.Equal(t, true, st.JSON()["held"], "the pipelined inspect is served after the grant")
	assert.Equal(t, "parked", st.Str("owner"))
	assert.Equal(t, got.Int("fence"), st.Int("fence"))

	// And the connection still serves requests after the pipelined one.
	rel := c.mustRoundTrip(t, rawReq{method: http.MethodDelete, path: "/locks/pipe", header: harness.Headers{"Lease-Token": got.Str("token")}})
	require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
	assert.Equal(t, true, rel.JSON()["released"])
}

func TestParkedLongPollServesARequestSentWhileParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "early", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	wait := waitReq("early", "parked", "early-wait-1", 30000, 10000)
	require.NoError(t, c.send(wait))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "early") == 1 })
	// The next request arrives on the socket of the parked connection: the client is alive, so
	// its wait goes on, and the request is served after the answer.
	inspect := rawReq{method: http.MethodGet, path: "/locks/early", header: harness.Headers{"X-Request-Id": "early-inspect-2"}}
	require.NoError(t, c.send(inspect))
	require.Equal(t, int64(1), e.waiters(t, "early"), "input from a parked client does not end its wait")
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/early", tokenHeader(holder.Str("token")), "").Status)

	got := c.mustRead(t, wait)
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "early-wait-1", got.Header.Get("X-Request-Id"))
	assert.Equal(t, "parked", got.Str("owner"))

	st := c.mustRead(t, inspect)
	require.Equal(t, http.StatusOK, st.Status, string(st.Body))
	assert.Equal(t, "early-inspect-2", st.Header.Get("X-Request-Id"))
	assert.Equal(t, true, st.JSON()["held"])
	assert.Equal(t, "parked", st.Str("owner"))

	rel := c.mustRoundTrip(t, rawReq{method: http.MethodDelete, path: "/locks/early", header: harness.Headers{"Lease-Token": got.Str("token")}})
	require.Equal(t, http.StatusOK, rel.Status, string(rel.Body))
}

func TestParkedLongPollHonoursConnectionClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "closing", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	// No X-Request-Id: the gateway makes one up, and the parked answer carries it too.
	wait := rawReq{method: http.MethodPost, path: "/locks/closing", body: waitBody("parked", 30000, 10000), close: true}
	require.NoError(t, c.send(wait))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "closing") == 1 })
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/closing", tokenHeader(holder.Str("token")), "").Status)

	got := c.mustRead(t, wait)
	require.Equal(t, http.StatusCreated, got.Status, string(got.Body))
	assert.Equal(t, "parked", got.Str("owner"))
	assert.Greater(t, got.Int("fence"), holder.Int("fence"))
	assert.NotEmpty(t, got.Header.Get("X-Request-Id"))
	assert.True(t, got.Close, "a request that said Connection: close is answered with Connection: close")

	_, err := c.br.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the gateway closes the connection after the answer")

	// The grant is good.
	st := e.client.Do(http.MethodGet, "/locks/closing", tokenHeader(got.Str("token")), "")
	assert.Equal(t, true, st.JSON()["yours"])
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/closing", tokenHeader(got.Str("token")), "").Status)
}

func TestParkedLongPollTimeoutAnswers409(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.hold(t, e.client, "late", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	wait := waitReq("late", "parked", "late-wait-1", 30000, 300)
	got := c.mustRoundTrip(t, wait)
	require.Equal(t, http.StatusConflict, got.Status, string(got.Body))
	assert.Equal(t, api.ContentTypeProblem, got.Header.Get("Content-Type"))
	assert.Equal(t, api.TypeLockHeld, got.Str("type"))
	assert.Equal(t, "late", got.Str("lock"))
	assert.Equal(t, "late-wait-1", got.Str("request_id"))
	assert.Equal(t, "late-wait-1", got.Header.Get("X-Request-Id"))
	assert.GreaterOrEqual(t, got.Int("waited_ms"), int64(300))
	assert.Greater(t, got.Int("retry_after_ms"), int64(0))
	retry, err := strconv.Atoi(got.Header.Get("Retry-After"))
	if assert.NoError(t, err, "Retry-After %q", got.Header.Get("Retry-After")) {
		assert.GreaterOrEqual(t, retry, 1)
	}
	assert.False(t, got.Close)
	assert.Equal(t, int64(0), e.waiters(t, "late"), "a timed-out waiter leaves the queue")

	health := c.mustRoundTrip(t, rawReq{method: http.MethodGet, path: "/healthz"})
	assert.Equal(t, http.StatusOK, health.Status, string(health.Body))
}

func TestParkedClientThatLeavesIsLoggedAndDequeued(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "leave", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	// The wait outlasts every deadline below: only noticing the departure ends it in time.
	require.NoError(t, c.send(waitReq("leave", "leaver", "parked-leaver-1", 30000, 50000)))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "leave") == 1 })
	require.NoError(t, c.conn.Close())

	eventually(t, 10*time.Second, "the departed waiter leaves the queue", func() bool { return e.waiters(t, "leave") == 0 })
	eventually(t, 10*time.Second, "the departed waiter's access-log line", func() bool {
		return len(accessLogLines(e.gw, "parked-leaver-1")) > 0
	})
	lines := accessLogLines(e.gw, "parked-leaver-1")
	require.Len(t, lines, 1, "one access-log line per request")
	assert.Equal(t, float64(499), lines[0]["status"], "a client that left is logged with 499")
	assert.Equal(t, http.MethodPost, lines[0]["method"])
	assert.Equal(t, "/locks/leave", lines[0]["path"])
	assert.Contains(t, lines[0], "duration_ms")

	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/leave", tokenHeader(holder.Str("token")), "").Status)
	st := e.client.Do(http.MethodGet, "/locks/leave", nil, "")
	assert.Equal(t, false, st.JSON()["held"], "nobody holds the lock after its holder released it")
	assert.Equal(t, int64(0), st.Int("waiters"))
}

// TestParkedClientThatPipelinesThenLeavesIsDequeued: a client that sends its next request while
// parked and then closes the connection has left all the same; its wait ends at once.
func TestParkedClientThatPipelinesThenLeavesIsDequeued(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "pipeleave", "holder", 60000)
	c := mustDialRaw(t, e.gw, 30*time.Second)

	require.NoError(t, c.send(waitReq("pipeleave", "leaver", "pipe-leaver-1", 120000, 50000)))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "pipeleave") == 1 })
	require.NoError(t, c.send(rawReq{method: http.MethodGet, path: "/locks/pipeleave", header: harness.Headers{"X-Request-Id": "pipe-leaver-2"}}))
	require.NoError(t, c.conn.Close())

	eventually(t, 10*time.Second, "the departed waiter leaves the queue", func() bool { return e.waiters(t, "pipeleave") == 0 })
	eventually(t, 10*time.Second, "the departed waiter's access-log line", func() bool {
		return len(accessLogLines(e.gw, "pipe-leaver-1")) > 0
	})
	assert.Equal(t, float64(499), accessLogLines(e.gw, "pipe-leaver-1")[0]["status"])
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/pipeleave", tokenHeader(holder.Str("token")), "").Status)
	assert.Equal(t, false, e.client.Do(http.MethodGet, "/locks/pipeleave", nil, "").JSON()["held"], "the lock is free, not held by the client that left")
}

func TestParkedLongPollIsAnsweredWithConnectionCloseOnShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.hold(t, e.client, "down", "holder", 60000)
	c := mustDialRaw(t, e.gw, 60*time.Second)

	wait := waitReq("down", "parked", "down-wait-1", 30000, 30000)
	require.NoError(t, c.send(wait))
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, "down") == 1 })

	stopped := make(chan error, 1)
	go func() { stopped <- e.gw.Stop() }()
	got := c.mustRead(t, wait)
	assert.Equal(t, http.StatusServiceUnavailable, got.Status, string(got.Body))
	assert.Equal(t, "down-wait-1", got.Header.Get("X-Request-Id"))
	assert.True(t, got.Close, "a stopping gateway closes the connections of the long-polls it ends")
	_, err := c.br.ReadByte()
	assert.ErrorIs(t, err, io.EOF)
	require.NoError(t, <-stopped, "the gateway exits cleanly")

	assert.Equal(t, "0", e.redis.MustDo(t, "ZCARD", e.gw.KeyPrefix+"{down}:q"), "the ended wait left the queue")
	assert.NotEqual(t, "0", e.redis.MustDo(t, "EXISTS", e.gw.KeyPrefix+"{down}"), "the holder keeps its lease")
}

// parkedWorker's outcome, sent to the test's goroutine.
type parkedOutcome struct {
	owner     string
	status    int
	fence     int64
	inspected string // the owner the holder saw when it inspected the lock
	yours     any
	released  int
	err       error
}

func TestManyParkedLongPollsAllGetTheLockOneAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	holder := e.hold(t, e.client, "many", "holder", 60000)
	const n = 40
	deadline := time.Now().Add(60 * time.Second)

	var inside, mostInside atomic.Int32
	results := make(chan parkedOutcome, n)
	for i := range n {
		owner := "w" + strconv.Itoa(i)
		go func() {
			out := parkedOutcome{owner: owner}
			defer func() { results <- out }()
			c, err := dialRaw(e.gw, time.Until(deadline))
			if err != nil {
				out.err = err
				return
			}
			defer c.conn.Close()
			got, err := c.roundTrip(waitReq("many", owner, "many-"+owner, 10000, 30000))
			if err != nil {
				out.err = err
				return
			}
			out.status, out.fence = got.Status, got.Int("fence")
			if got.Status != http.StatusCreated {
				out.err = fmt.Errorf("acquire answered %d: %s", got.Status, got.Body)
				return
			}
			// The critical section: nobody else may be in it.
			now := inside.Add(1)
			for {
				most := mostInside.Load()
				if now <= most || mostInside.CompareAndSwap(most, now) {
					break
				}
			}
			token := got.Str("token")
			st, err := c.roundTrip(rawReq{method: http.MethodGet, path: "/locks/many", header: harness.Headers{"Lease-Token": token}})
			inside.Add(-1)
			if err != nil {
				out.err = err
				return
			}
			out.inspected, out.yours = st.Str("owner"), st.JSON()["yours"]
			// Released on the same connection, which the gateway handed back after the answer.
			rel, err := c.roundTrip(rawReq{method: http.MethodDelete, path: "/locks/many", header: harness.Headers{"Lease-Token": token}})
			if err != nil {
				out.err = err
				return
			}
			out.released = rel.Status
		}()
	}
	eventually(t, 20*time.Second, "all waiters queued", func() bool { return e.waiters(t, "many") == n })
	require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/many", tokenHeader(holder.Str("token")), "").Status)

	fences := map[int64]string{}
	for range n {
		var out parkedOutcome
		select {
		case out = <-results:
		case <-time.After(time.Until(deadline) + 10*time.Second):
			t.Fatalf("not every waiter finished by the deadline")
		}
		if !assert.NoError(t, out.err, "waiter %s", out.owner) {
			continue
		}
		assert.Equal(t, http.StatusCreated, out.status, "waiter %s", out.owner)
		assert.Equal(t, out.owner, out.inspected, "waiter %s inspects the lock as its holder", out.owner)
		assert.Equal(t, true, out.yours, "waiter %s", out.owner)
		assert.Equal(t, http.StatusOK, out.released, "waiter %s releases", out.owner)
		assert.Greater(t, out.fence, holder.Int("fence"), "waiter %s", out.owner)
		if prev, dup := fences[out.fence]; dup {
			t.Errorf("waiters %s and %s were both granted fence %d", prev, out.owner, out.fence)
		}
		fences[out.fence] = out.owner
	}
	assert.Len(t, fences, n, "every waiter got a distinct fence")
	assert.Equal(t, int32(1), mostInside.Load(), "the critical sections never overlapped")
	st := e.client.Do(http.MethodGet, "/locks/many", nil, "")
	assert.Equal(t, false, st.JSON()["held"])
	assert.Equal(t, int64(0), st.Int("waiters"))
}

func TestParkedClientThatLeavesAsTheLockComesNeverKeepsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// The client leaves just as the lock is released to it. When the gateway sees the departure
	// first, the lease must not stay with the departed client: a grant that reaches it is
	// released at once. (Its TTL outlasts the test, so only that release frees the lock in time.)
	// When the answer is written before the departure is seen, the client got its grant as far
	// as the gateway can tell, and keeps it until its TTL: that round proves nothing.
	const rounds = 10
	departed := 0
	for i := range rounds {
		lock := "race" + strconv.Itoa(i)
		id := "parked-racer-" + strconv.Itoa(i)
		holder := e.hold(t, e.client, lock, "holder", 60000)
		c := mustDialRaw(t, e.gw, 30*time.Second)
		require.NoError(t, c.send(waitReq(lock, "racer", id, 120000, 50000)))
		eventually(t, 10*time.Second, "the waiter queued", func() bool { return e.waiters(t, lock) == 1 })

		require.NoError(t, c.conn.Close())
		require.Equal(t, http.StatusOK, e.client.Do(http.MethodDelete, "/locks/"+lock, tokenHeader(holder.Str("token")), "").Status)

		eventually(t, 10*time.Second, "the waiter's access-log line", func() bool {
			return len(accessLogLines(e.gw, id)) > 0
		})
		lines := accessLogLines(e.gw, id)
		require.Len(t, lines, 1, "one access-log line per request")
		status := lines[0]["status"]
		if status == float64(http.StatusCreated) {
			t.Logf("round %d: the grant was answered before the departure was seen", i)
			continue
		}
		require.Equal(t, float64(499), status, "round %d: a client that left is logged with 499", i)
		departed++
		eventually(t, 10*time.Second, "the lock free of the departed waiter", func() bool {
			st := e.client.Do(http.MethodGet, "/locks/"+lock, nil, "")
			return st.JSON()["held"] == false && st.Int("waiters") == 0
		})
	}
	t.Logf("%d of %d departures seen before the answer", departed, rounds)
}
