package security

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/luascripts"
)

// scriptMonitor follows one redis-server's MONITOR stream, to tell which scripts ran while a
// request was served. INFO commandstats cannot tell: it counts the gateway's own periodic calls
// too, such as the long-hold sweep's read-only aged.lua (every 10 s at most; the first one as
// EVALSHA_RO, answered NOSCRIPT, then EVAL_RO), which a run slowed down by a busy machine catches
// between a case's before and after. MONITOR shows each call with its script's SHA1 or text, in
// the order the server ran it.
type scriptMonitor struct {
	marks *redisConn  // where the marks are sent from
	lines chan string // MONITOR's lines; closed when the connection ends
	err   error       // why it ended, read once lines is closed
}

// sweeps are the SHA1s of the scripts the gateway runs on its own schedule, whatever requests
// come: the long-hold sweep's, and the watchdog's check of a schedule shard (Redis Cluster only).
// Both only read.
var sweeps = map[string]string{sha1Hex(luascripts.Aged): "aged.lua", sha1Hex(luascripts.WatchdogDue): "watchdog_due.lua"}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// monitorScripts starts following r's MONITOR stream until t ends.
func monitorScripts(t *testing.T, r *harness.Redis) *scriptMonitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", r.Addr, redisTimeout)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	br := bufio.NewReader(conn)
	require.NoError(t, conn.SetDeadline(time.Now().Add(redisTimeout)))
	_, err = conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n"))
	require.NoError(t, err)
	ok, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", ok, "MONITOR's reply")
	require.NoError(t, conn.SetDeadline(time.Time{}))

	m := &scriptMonitor{marks: connect(t, r), lines: make(chan string, 1024)}
	done := make(chan struct{})
	go func() { // sends what it reads; the test's goroutine reads it and fails the test
		defer close(done)
		defer close(m.lines)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				m.err = err
				return
			}
			line = strings.TrimSuffix(line, "\r\n")
			if !strings.HasPrefix(line, "+") {
				m.err = fmt.Errorf("MONITOR: unexpected reply %q", line)
				return
			}
			m.lines <- line[1:]
		}
	}()
	t.Cleanup(func() { // before the Close above
		conn.Close()
		for range m.lines { // unblock the reader, which then ends
		}
		<-done
	})
	return m
}

// during runs f and returns the script calls the server ran meanwhile, other than the gateway's
// sweeps, each as the command, the script (its SHA1) and its keys and arguments. Those of a
// request f makes are among them: they end before its response, and the closing mark is sent
// after it.
func (m *scriptMonitor) during(t *testing.T, f func()) []string {
	t.Helper()
	mark := uuid.NewString()
	m.mark(t, "begin "+mark)
	m.skipTo(t, "begin "+mark, nil)
	f()
	m.mark(t, "end "+mark)
	var calls []string
	m.skipTo(t, "end "+mark, func(args []string) {
		if c := scriptCall(args); c != "" {
			calls = append(calls, c)
		}
	})
	return calls
}

func (m *scriptMonitor) mark(t *testing.T, text string) {
	t.Helper()
	m.marks.Do(t, "ECHO", text)
}

// skipTo reads MONITOR's lines up to the ECHO of text, handing each command's arguments before
// it to seen (when not nil). A server busy with other tests may take a while to answer.
func (m *scriptMonitor) skipTo(t *testing.T, text string, seen func(args []string)) {
	t.Helper()
	timeout := time.After(redisTimeout)
	for {
		select {
		case line, ok := <-m.lines:
			if !ok {
				t.Fatalf("MONITOR ended: %v", m.err)
			}
			args, err := monitorArgs(line)
			require.NoError(t, err)
			if len(args) == 2 && strings.EqualFold(args[0], "ECHO") && args[1] == text {
				return
			}
			if seen != nil {
				seen(args)
			}
		case <-timeout:
			t.Fatalf("MONITOR did not show ECHO %q within %v", text, redisTimeout)
		}
	}
}

// scriptCall renders a command that runs a script, other than a sweep's, as "COMMAND sha1 numkeys
// keys and arguments" ("" for any other command).
func scriptCall(args []string) string {
	if len(args) < 2 {
		return ""
	}
	sha := args[1]
	switch strings.ToUpper(args[0]) {
	case "EVAL", "EVAL_RO":
		sha = sha1Hex(args[1])
	case "EVALSHA", "EVALSHA_RO", "FCALL", "FCALL_RO":
	default:
		return ""
	}
	if _, ok := sweeps[strings.ToLower(sha)]; ok {
		return ""
	}
	return strings.ToUpper(args[0]) + " " + sha + " " + strings.Join(args[2:], " ")
}

// monitorArgs parses a MONITOR line, `<time> [<db> <client>] "arg" "arg"...`, into the command's
// arguments. Redis quotes each one as sdscatrepr does: \\, \", \n, \r, \t, \a, \b and \xHH.
func monitorArgs(line string) ([]string, error) {
	_, rest, ok := strings.Cut(line, "] ")
	if !ok {
		return nil, fmt.Errorf("MONITOR line %q: no client", line)
	}
	var args []string
	for rest != "" {
		if rest[0] != '"' {
			return nil, fmt.Errorf("MONITOR line %q: argument not quoted at %q", line, rest)
		}
		var arg strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] != '\\' {
				arg.WriteByte(rest[i])
				continue
			}
			if i+1 >= len(rest) {
				return nil, errors.New("MONITOR line ends in an escape")
			}
			i++
			switch rest[i] {
			case 'n':
				arg.WriteByte('\n')
			case 'r':
				arg.WriteByte('\r')
			case 't':
				arg.WriteByte('\t')
			case 'a':
				arg.WriteByte('\a')
			case 'b':
				arg.WriteByte('\b')
			case 'x':
				if i+2 >= len(rest) {
					return nil, errors.New("MONITOR line ends in a \\x escape")
				}
				b, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
				if err != nil {
					return nil, fmt.Errorf("MONITOR line: escape \\x%s: %w", rest[i+1:i+3], err)
				}
				arg.WriteByte(byte(b))
				i += 2
			default: // \\ and \"
				arg.WriteByte(rest[i])
			}
		}
		if i >= len(rest) {
			return nil, fmt.Errorf("MONITOR line %q: unterminated argument", line)
		}
		args = append(args, arg.String())
		rest = strings.TrimPrefix(rest[i+1:], " ")
	}
	return args, nil
}
