package security

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// redisConn is one connection to a redis-server, kept for a test's many reads (a keyspace before
// and after each of some 190 cases). harness.Redis.Do dials afresh for each command and gives the
// dial a second, which a busy machine has missed. Not safe for concurrent use.
type redisConn struct {
	addr string
	conn net.Conn // nil until the first command, and after an error
	br   *bufio.Reader
}

// redisTimeout bounds a dial and a command's round trip: generous, as a wait for an answer costs
// nothing when the answer comes.
const redisTimeout = 30 * time.Second

// connect returns a redisConn to r (plain TCP, no AUTH: the standalone server of testkit.NewEnv),
// closed when t ends.
func connect(t *testing.T, r *harness.Redis) *redisConn {
	c := &redisConn{addr: r.Addr}
	t.Cleanup(func() {
		if c.conn != nil {
			c.conn.Close()
		}
	})
	return c
}

// Do runs one command and renders its reply as harness.Redis.Do does: integers and bulk strings as
// themselves, arrays as lines joined by "\n", nil as "". It fails t on any error; the next
// command then goes on a new connection.
func (c *redisConn) Do(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.do(args)
	if err != nil {
		if c.conn != nil {
			c.conn.Close()
			c.conn = nil
		}
		require.NoError(t, err, "redis %v", args)
	}
	return out
}

func (c *redisConn) do(args []string) (string, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, redisTimeout)
		if err != nil {
			return "", err
		}
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	if err := c.conn.SetDeadline(time.Now().Add(redisTimeout)); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.conn, b.String()); err != nil {
		return "", err
	}
	return readReply(c.br)
}

// readReply reads one RESP2 reply, rendered as redisConn.Do says.
func readReply(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(br)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
