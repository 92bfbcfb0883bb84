package locks

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// resetAfterSending sends one HTTP request on a fresh connection and resets the connection (RST,
// not FIN) at once, without reading the answer: a client killed right after sending.
func resetAfterSending(t *testing.T, base, method, path, body string) {
	t.Helper()
	resetAfterSendingRaw(t, base, fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, path, len(body), body))
}

// resetAfterSendingRaw is resetAfterSending for a request written out in full.
func resetAfterSendingRaw(t *testing.T, base, req string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).SetLinger(0))
	_, err = conn.Write([]byte(req))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
}

// linesAbout returns the lines of logs that contain s.
func linesAbout(logs, s string) string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestGrantsNobodyReceivedAreGivenBack sends try-once acquires whose clients reset their
// connection right after sending. A grant whose answer cannot be delivered must not stay held for
// its TTL: the gateway gives it back when the client is gone before or as the answer is written.
// An answer that left the gateway before the reset arrived cannot be told from one the client
// read: it counts as delivered (logged 201) and stays held. Here the reset follows the request at
// once, so that happens only when this test's thread is descheduled between two syscalls; two such
// hiccups are allowed. Before the gateway flushed and checked its answers, 4-21 of 300 grants were
// logged as delivered and stayed held although the write had failed.
func TestGrantsNobodyReceivedAreGivenBack(t *testing.T) {
	t.Parallel()
	// Every request logged, the delivered grants (201) too: by default only errors are.
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_ACCESS_LOG": "all"})
	const n = 300
	for i := range n {
		resetAfterSending(t, e.Gateway.URL, http.MethodPost, fmt.Sprintf("/locks/reset-%d", i), testkit.AcquireBody("gone", 600000))
	}
	// Every request the gateway read has been logged (answered, or 499 when the client was gone)
	// once the count stops growing for 2 s. A reset that reached the gateway before it read the
	// request discards it unread (seen once in 300 on a busy machine): such a request grants
	// nothing, and its name is checked below like the others.
	logged, changed := -1, time.Now()
	harness.Eventually(t, 30*time.Second, "the gateway to log what it read", func() bool {
		if c := strings.Count(e.Gateway.Logs(), `"path":"/locks/reset-`); c != logged {
			logged, changed = c, time.Now()
		}
		return logged == n || time.Since(changed) >= 2*time.Second
	})
	logs := e.Gateway.Logs()
	held, delivered := 0, 0
	for i := range n {
		st := e.Client.Do(http.MethodGet, fmt.Sprintf("/locks/reset-%d", i), nil, "")
		if st.JSON()["held"] == true {
			held++
			t.Logf("reset-%d is held: %s; the gateway's lines about it:\n%s", i, st.Body, linesAbout(logs, fmt.Sprintf("reset-%d\"", i)))
		}
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"path":"/locks/reset-`) && strings.Contains(line, `"status":201`) {
			delivered++
		}
	}
	t.Logf("%d of %d grants still held; %d logged as delivered (201), %d as client gone (499), %d never read",
		held, n, delivered, strings.Count(logs, `"status":499`), n-strings.Count(logs, `"path":"/locks/reset-`))
	assert.Equal(t, delivered, held, "a lock stays held exactly when its grant was logged as delivered")
	assert.LessOrEqual(t, delivered, 2, "grants written to a reset connection are given back")
}
