// Package harness starts the real components leasegate's tests run against: redis-server
// processes on free loopback ports and gateway processes built from this module, and gives tests
// an HTTP client that validates every response against openapi.yaml.
//
// Everything it starts binds to 127.0.0.1 and is stopped by t.Cleanup (or by Stop for callers
// without a testing.T, such as bench/).
package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedisOptions configure one redis-server. The zero value is a plain, persistence-free server.
type RedisOptions struct {
	// Args are extra redis-server arguments, e.g. {"--requirepass", "s3cret"}.
	Args []string
}

// Redis is one redis-server process on a loopback port. Its port stays the same across Restart,
// so clients configured with Addr reconnect to the restarted server.
type Redis struct {
	Addr string
	Port int

	opts RedisOptions
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// NewRedis starts a redis-server for t and stops it when t ends. It fails t when redis-server is
// missing: install Debian's redis-server (the README test command does).
func NewRedis(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	dir := t.TempDir()
	r, err := StartRedis(dir, opts)
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// StartRedis starts a redis-server keeping its files in dir. The caller must Stop it.
func StartRedis(dir string, opts RedisOptions) (*Redis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (apt-get install redis-server): %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // a free port may be taken before redis binds it
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, opts: opts, dir: dir}
		if lastErr = r.start(); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

func (r *Redis) start() error {
	args := append([]string{
		"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(r.dir, "redis-"+strconv.Itoa(r.Port)+".log"),
		"--enable-debug-command", "local",
	}, r.opts.Args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	if err := waitFor(10*time.Second, done, func() bool { _, err := r.Do("PING"); return err == nil }); err != nil {
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(filepath.Join(r.dir, "redis-"+strconv.Itoa(r.Port)+".log"))
		return fmt.Errorf("redis-server on port %d: %w; log: %s", r.Port, err, log)
	}
	return nil
}

// Stop shuts the server down (SIGTERM) and waits for it to exit. Safe to call twice.
func (r *Redis) Stop() error { return r.signal(false) }

// Kill stops the server at once (SIGKILL), as a crash would.
func (r *Redis) Kill() error { return r.signal(true) }

func (r *Redis) signal(kill bool) error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if kill {
		_ = cmd.Process.Kill()
	} else {
		_ = cmd.Process.Signal(os.Interrupt)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

// Restart starts the server again on the same port after Stop or Kill. Data is not kept.
func (r *Redis) Restart() error {
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the old socket may linger briefly
		if err = r.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // back-off between attempts to bind, not synchronisation
	}
	return err
}

// Do runs one command over a fresh connection and returns its reply rendered as text: integers
// and bulk strings as themselves, arrays as lines joined by "\n", nil as "". A Redis error reply
// is returned as an error. It is for test set-up and assertions, not for the lock path.
func (r *Redis) Do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

// MustDo is Do for test code: it fails t on error.
func (r *Redis) MustDo(t testing.TB, args ...string) string {
	t.Helper()
	out, err := r.Do(args...)
	if err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return out
}

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
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
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

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls cond every 10 ms until it holds, exited is closed, or timeout passes.
func waitFor(timeout time.Duration, exited <-chan struct{}, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-exited:
			return errors.New("process exited")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", timeout)
		}
	}
	return nil
}

// ScriptCalls returns how many script calls (EVAL, EVALSHA and their _RO forms) the server has
// run since it started or since CONFIG RESETSTAT, from INFO commandstats.
func (r *Redis) ScriptCalls() (int64, error) {
	info, err := r.Do("INFO", "commandstats")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("commandstats line %q: %w", line, err)
		}
		total += n
	}
	return total, nil
}

// Eventually checks cond every 5 ms until it holds, failing t after timeout: the tests' way to
// wait for a condition instead of sleeping. Call it from the test's goroutine only.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-time.After(5 * time.Millisecond)
	}
}
