package operations

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// A client that opens a stream and then reads nothing, while events flow, must not hold SIGTERM
// up: the handler's write to it is cut short when the gateway shuts down.
func TestEventsShutdownIsNotHeldUpByAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	gw := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	c := harness.NewClient(t, gw.URL)

	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { // a small receive window: the gateway's writes block sooner
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "GET /semaphores/flood/events HTTP/1.1\r\nHost: gateway\r\n\r\n")
	require.NoError(t, err)
	// Read up to the first event (the state), then nothing more.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReaderSize(conn, 512)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "the stream's start")
		if line == "event: state\n" {
			break
		}
	}

	// Megabytes of events: rounds of 1000 permits with long owners, each ended by a force release
	// (one event listing every permit).
	const permits = 1000
	owner := strings.Repeat("o", 120)
	var failed atomic.Int64
	for round := range 6 {
		var wg sync.WaitGroup
		work := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					r := c.Do(http.MethodPost, "/semaphores/flood", nil, fmt.Sprintf(`{"owner":"%s%05d","permits":%d,"ttl_ms":60000}`, owner, i, permits))
					if r.Status != http.StatusCreated {
						failed.Add(1)
					}
				}
			}()
		}
		for i := range permits {
			work <- round*permits + i
		}
		close(work)
		wg.Wait()
		require.Zero(t, failed.Load(), "acquires that failed")
		f := c.Do(http.MethodDelete, "/semaphores/flood?force=true", nil, "")
		require.Equal(t, http.StatusOK, f.Status, string(f.Body))
	}

	start := time.Now()
	require.NoError(t, gw.Stop(), "a clean exit (SIGTERM)")
	assert.Less(t, time.Since(start), 10*time.Second, "the stream nobody reads does not hold the shutdown up")
}
