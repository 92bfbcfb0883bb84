// Package harness starts the real components leasegate's tests run against: redis-server
// processes on free loopback ports and gateway processes built from this module, and gives tests
// an HTTP client that validates every response against openapi.yaml.
//
// Everything it starts binds to 127.0.0.1 and is stopped by t.Cleanup (or by Stop for callers
// without a testing.T, such as bench/).
package harness

import (
	"bufio"
	"crypto/tls"
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
	// Port is the port to listen on; 0 picks a free one (and another if it is taken meanwhile).
	Port int
	// ConfFile, when set, is redis-server's configuration file, read before the harness's
	// arguments and Args. A sentinel needs one: it rewrites it.
	ConfFile string
	// Sentinel runs the process as a sentinel (redis-server CONF --sentinel); it needs ConfFile.
	Sentinel bool
	// TLS, when set, makes the server accept TLS only, on Port (--port 0 --tls-port Port), and Do
	// connect with this client configuration. Args must name the server's certificate files.
	TLS *tls.Config
	// Username and Password, when Password is set, are what Do authenticates with (AUTH).
	Username, Password string
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
		port := opts.Port
		if port == 0 {
			var err error
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		} else if attempt > 0 {
			break // a fixed port is tried once
		}
		r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, opts: opts, dir: dir}
		if lastErr = r.start(); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

func (r *Redis) start() error {
	var args []string
	if r.opts.ConfFile != "" {
		args = append(args, r.opts.ConfFile)
	}
	if r.opts.Sentinel {
		args = append(args, "--sentinel")
	}
	if r.opts.TLS != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(r.Port))
	} else {
		args = append(args, "--port", strconv.Itoa(r.Port))
	}
	args = append(append(args,
		"--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(r.dir, "redis-"+strconv.Itoa(r.Port)+".log"),
		"--enable-debug-command", "local",
	), r.opts.Args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	// The server that answers must be this one: when another process took the port between
	// FreePort and the bind, this one exits, and the other one answers (a port race between
	// test packages, seen as "is not configured as a cluster node" on a Cluster rig).
	ours := "process_id:" + strconv.Itoa(cmd.Process.Pid) + "\r\n"
	if err := waitFor(10*time.Second, done, func() bool {
		info, err := r.Do("INFO", "server")
		return err == nil && strings.Contains(info, ours)
	}); err != nil {
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

// stopAll stops servers concurrently (a master stopped alone waits for its replicas to catch up)
// and, when t failed, logs the tail of each one's log.
func stopAll(t testing.TB, servers []*Redis) {
	var wg sync.WaitGroup
	for _, r := range servers {
		wg.Go(func() { _ = r.Stop() })
	}
	wg.Wait()
	if t.Failed() {
		for _, r := range servers {
			if log := r.Log(); log != "" {
				t.Logf("%s log tail:\n%s", r.Addr, tail(log, 30))
			}
		}
	}
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

// Do runs one command over a fresh connection (TLS and AUTH as RedisOptions say) and returns its
// reply rendered as text: integers and bulk strings as themselves, arrays as lines joined by "\n",
// nil as "". A Redis error reply is returned as an error. It is for test set-up and assertions,
// not for the lock path.
func (r *Redis) Do(args ...string) (string, error) {
	return r.DoAs(r.opts.Username, r.opts.Password, args...)
}

// DoAs is Do authenticated as username with password instead (username "" means AUTH password,
// the default user); with an empty password it sends no AUTH at all.
func (r *Redis) DoAs(username, password string, args ...string) (string, error) {
	var out string
	err := r.roundTrip(username, password, args, func(br *bufio.Reader) (err error) {
		out, err = readReply(br)
		return err
	})
	return out, err
}

// DoList is Do for commands answering an array: one string per element, each rendered as Do
// renders a reply (so nested arrays become lines), which keeps elements holding "\n" apart.
func (r *Redis) DoList(args ...string) ([]string, error) {
	var out []string
	err := r.roundTrip(r.opts.Username, r.opts.Password, args, func(br *bufio.Reader) (err error) {
		out, err = readArray(br)
		return err
	})
	return out, err
}

// Log returns what the server has written to its log file so far.
func (r *Redis) Log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis-"+strconv.Itoa(r.Port)+".log"))
	return string(b)
}

// Role returns the first element of ROLE: "master", "slave" or "sentinel".
func (r *Redis) Role() (string, error) {
	out, err := r.Do("ROLE")
	role, _, _ := strings.Cut(out, "\n")
	return role, err
}

// Running reports whether the process is up: started, neither stopped nor exited.
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// roundTrip sends args (after AUTH when password is set) on a fresh connection and hands the
// command's reply to read.
func (r *Redis) roundTrip(username, password string, args []string, read func(*bufio.Reader) error) error {
	dialer := &net.Dialer{Timeout: time.Second}
	var conn net.Conn
	var err error
	if r.opts.TLS != nil {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: r.opts.TLS}).Dial("tcp", r.Addr)
	} else {
		conn, err = dialer.Dial("tcp", r.Addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	if password != "" {
		auth := []string{"AUTH", password}
		if username != "" {
			auth = []string{"AUTH", username, password}
		}
		writeCommand(&b, auth)
	}
	writeCommand(&b, args)
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	if password != "" {
		if _, err := readReply(br); err != nil {
			return fmt.Errorf("AUTH: %w", err)
		}
	}
	return read(br)
}

func writeCommand(b *strings.Builder, args []string) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(a), a)
	}
}

// readArray reads an array reply as one rendered string per element; nil reads as no elements.
func readArray(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "-"):
		return nil, errors.New(line[1:])
	case !strings.HasPrefix(line, "*"):
		return nil, fmt.Errorf("expected an array, got %q", line)
	}
	n, _ := strconv.Atoi(line[1:])
	return readElements(br, n)
}

// readElements reads n replies, an array's elements.
func readElements(br *bufio.Reader, n int) ([]string, error) {
	parts := make([]string, 0, max(n, 0))
	for i := 0; i < n; i++ {
		p, err := readReply(br)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return parts, nil
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
		parts, err := readElements(br, n)
		return strings.Join(parts, "\n"), err
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

// FreePorts returns n distinct loopback TCP ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close() // held until all are picked, so that no port comes twice
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pollUntil calls cond until it returns nil, waiting interval between calls; after timeout it
// returns cond's last error.
func pollUntil(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		<-time.After(interval)
	}
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

// Eventually checks cond until it holds, failing t after timeout: the tests' way to wait for a
// condition instead of sleeping. Call it from the test's goroutine only.
//
// It checks 5 ms after the first check, then half as long again after each, up to every
// EventuallyMaxPace: a condition that holds soon is seen soon, and one that takes seconds (a TTL
// to run out) costs tens of checks, not hundreds. Checked every 5 ms, the suite's conditions (an
// HTTP request, a Redis command, a scrape of /metrics or a read of a gateway's log, each) took a
// large share of a 2-core machine's CPU while hundreds of tests waited at once.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pace := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-time.After(pace)
		pace = min(pace*3/2, EventuallyMaxPace)
	}
}

// EventuallyMaxPace is the longest Eventually waits between two checks.
const EventuallyMaxPace = 40 * time.Millisecond
