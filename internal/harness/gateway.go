package harness

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestTokenSecret is the token secret gateways share unless a test sets its own.
const TestTokenSecret = "harness-secret-0123456789abcdef"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binShared bool // binPath is LEASEGATE_TEST_GATEWAY_BINARY's, not this process's
)

// GatewayBinary builds this module's gateway once per test process (with -race when the tests
// run with it) and returns the binary's path. The binary lives in a directory of its own under
// os.TempDir() that RemoveGatewayBinary removes; what a process killed before it could (a test
// timeout, an interrupted run) left behind is removed by the next process that builds one (see
// claimBinaryDir).
//
// LEASEGATE_TEST_GATEWAY_BINARY, when set, names a gateway built beforehand for every test process
// of a run (scripts/test builds one, with -race when the tests run with it: each package linking
// its own cost the run a link of the same 40 MB binary per package); it is used as it is, and
// left where it is.
func GatewayBinary() (string, error) {
	buildOnce.Do(func() {
		if prebuilt := os.Getenv("LEASEGATE_TEST_GATEWAY_BINARY"); prebuilt != "" {
			if _, err := os.Stat(prebuilt); err != nil {
				buildErr = fmt.Errorf("LEASEGATE_TEST_GATEWAY_BINARY: %w", err)
			}
			binPath, binShared = prebuilt, true
			return
		}
		root, err := ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		removeStaleBinaryDirs()
		dir, err := claimBinaryDir()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "leasegate")
		args := []string{"build", "-o", binPath}
		if RaceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	return binPath, buildErr
}

// RemoveGatewayBinary removes what GatewayBinary built, if anything: call it once this process
// starts no more gateways (or CLI processes), at the end of TestMain.
func RemoveGatewayBinary() error {
	if binPath == "" || binShared {
		return nil
	}
	releaseBinaryDir()
	return os.RemoveAll(filepath.Dir(binPath))
}

// ModuleRoot returns the directory holding this module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// GatewayOptions configure one gateway process.
type GatewayOptions struct {
	// Redis is the server the gateway uses (LEASEGATE_REDIS_ADDR).
	Redis *Redis
	// RedisURL, when set, is the deployment the gateway uses instead (LEASEGATE_REDIS_URL, and
	// no LEASEGATE_REDIS_ADDR), e.g. a SentinelRig's, ClusterRig's or TLSRedis's URL.
	RedisURL string
	// KeyPrefix isolates a test's keys; default a fresh random prefix.
	KeyPrefix string
	// Env adds or overrides LEASEGATE_* variables, e.g. {"LEASEGATE_MAX_TTL": "10s"}.
	Env map[string]string
	// Binary is the gateway executable; default this module's, built by GatewayBinary. The
	// benchmarks set it to compare against another build.
	Binary string
	// TLS, when set, makes the gateway serve HTTPS with these files: URL is https://..., and
	// readiness is polled over TLS.
	TLS *GatewayTLS
}

// GatewayTLS is a TLS gateway's certificates (e.g. from WriteServerCertificates).
type GatewayTLS struct {
	// CertFile and KeyFile are the server's pair (LEASEGATE_TLS_CERT_FILE, LEASEGATE_TLS_KEY_FILE).
	CertFile, KeyFile string
	// RootCAs is what clients trust the server's certificate by (CA.Pool).
	RootCAs *x509.CertPool
	// ClientCAFile, when set, makes the gateway require client certificates signed by it
	// (LEASEGATE_TLS_CLIENT_CA_FILE); ClientCert is then the one the harness presents.
	ClientCAFile string
	ClientCert   *tls.Certificate
}

// ClientConfig is the TLS configuration of a client of the gateway: trusting RootCAs, presenting
// ClientCert when set.
func (o *GatewayTLS) ClientConfig() *tls.Config {
	cfg := &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}
	if o.ClientCert != nil {
		cfg.Certificates = []tls.Certificate{*o.ClientCert}
	}
	return cfg
}

// Gateway is one leasegate process listening on a loopback port.
type Gateway struct {
	URL       string
	KeyPrefix string
	// TLS is GatewayOptions.TLS: nil for a plain HTTP gateway.
	TLS *GatewayTLS

	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	crashed bool // the process exited while cmd was still set: not by Stop or Kill
}

// NewGateway starts a gateway for t and stops it (SIGTERM) when t ends. When t failed, the
// gateway's log tail goes to t's output.
func NewGateway(t testing.TB, opts GatewayOptions) *Gateway {
	t.Helper()
	g, err := StartGateway(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	t.Cleanup(func() {
		_ = g.Stop()
		if t.Failed() {
			t.Logf("gateway %s log tail:\n%s", g.URL, tail(g.Logs(), 40))
		}
	})
	return g
}

// StartGateway starts a gateway writing its log into dir. The caller must Stop it.
func StartGateway(dir string, opts GatewayOptions) (*Gateway, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = GatewayBinary(); err != nil {
			return nil, err
		}
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = RandomPrefix()
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		g := &Gateway{
			URL:       "http://127.0.0.1:" + strconv.Itoa(port),
			KeyPrefix: opts.KeyPrefix,
			TLS:       opts.TLS,
			logPath:   filepath.Join(dir, "gateway-"+strconv.Itoa(port)+".log"),
		}
		env := map[string]string{
			"LEASEGATE_LISTEN":       "127.0.0.1:" + strconv.Itoa(port),
			"LEASEGATE_TOKEN_SECRET": TestTokenSecret,
			"LEASEGATE_KEY_PREFIX":   opts.KeyPrefix,
		}
		if opts.TLS != nil {
			g.URL = "https://127.0.0.1:" + strconv.Itoa(port)
			env["LEASEGATE_TLS_CERT_FILE"], env["LEASEGATE_TLS_KEY_FILE"] = opts.TLS.CertFile, opts.TLS.KeyFile
			if opts.TLS.ClientCAFile != "" {
				env["LEASEGATE_TLS_CLIENT_CA_FILE"] = opts.TLS.ClientCAFile
			}
		}
		if opts.RedisURL != "" {
			env["LEASEGATE_REDIS_URL"] = opts.RedisURL
		} else if opts.Redis != nil {
			env["LEASEGATE_REDIS_ADDR"] = opts.Redis.Addr
		}
		for k, v := range opts.Env {
			env[k] = v
		}
		if lastErr = g.start(bin, env); lastErr == nil {
			return g, nil
		}
	}
	return nil, lastErr
}

func (g *Gateway) start(bin string, env map[string]string) error {
	logf, err := os.Create(g.logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		logf.Close()
		g.mu.Lock()
		g.exitErr = err
		g.crashed = g.cmd == cmd // Stop and Kill clear cmd before they signal
		g.mu.Unlock()
		close(done)
	}()
	g.mu.Lock()
	g.cmd, g.done = cmd, done
	g.mu.Unlock()
	probe := http.DefaultClient
	if g.TLS != nil {
		tr := &http.Transport{TLSClientConfig: g.TLS.ClientConfig()}
		defer tr.CloseIdleConnections()
		probe = &http.Client{Transport: tr}
	}
	port, _ := strconv.Atoi(g.URL[strings.LastIndex(g.URL, ":")+1:])
	err = waitFor(30*time.Second, done, func() bool {
		// The process that listens must be this one: when another took the port between
		// FreePort and the bind ("bind: address already in use"), this one exits while the
		// other answers.
		if !listensOn(cmd.Process.Pid, port) {
			return false
		}
		resp, err := probe.Get(g.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		g.mu.Lock()
		g.cmd = nil // not a crash: the harness gives up on it
		g.mu.Unlock()
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("gateway %s: %w; log:\n%s", g.URL, err, g.Logs())
	}
	return nil
}

// Stop sends SIGTERM and waits for the process to exit; it returns the process's exit error.
func (g *Gateway) Stop() error { return g.signal(syscall.SIGTERM) }

// Pause freezes the gateway (SIGSTOP), as a stalled host or a long GC pause would; Resume
// (SIGCONT) lets it go on. A paused gateway is resumed before Stop or Kill signals it.
func (g *Gateway) Pause() error { return g.send(syscall.SIGSTOP) }

// Resume lets a paused gateway go on (SIGCONT).
func (g *Gateway) Resume() error { return g.send(syscall.SIGCONT) }

// send sends sig to the running gateway, if any, without waiting.
func (g *Gateway) send(sig syscall.Signal) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return nil
	}
	return g.cmd.Process.Signal(sig)
}

// Kill stops the gateway at once (SIGKILL), as a crash would, and waits for it to be gone.
func (g *Gateway) Kill() error {
	err := g.signal(syscall.SIGKILL)
	if ee, ok := err.(*exec.ExitError); ok && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
		return nil
	}
	return err
}

func (g *Gateway) signal(sig syscall.Signal) error {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.cmd = nil
	g.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process would not act on sig
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.exitErr
}

// Crashed reports whether the gateway's process exited on its own (a panic, a fatal error, an
// exit of its own accord) rather than by Stop or Kill, and then its exit status and log tail. It
// stays true once the process has crashed, also after a later Stop. Safe for concurrent use.
func (g *Gateway) Crashed() (bool, string) {
	g.mu.Lock()
	crashed, exitErr := g.crashed, g.exitErr
	g.mu.Unlock()
	if !crashed {
		return false, ""
	}
	return true, fmt.Sprintf("gateway %s exited on its own (%v); log tail:\n%s", g.URL, exitErr, tail(g.Logs(), 40))
}

// Hangup sends SIGHUP to the running gateway (which re-reads its auth file) and returns at once.
func (g *Gateway) Hangup() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return fmt.Errorf("gateway %s is stopped", g.URL)
	}
	return g.cmd.Process.Signal(syscall.SIGHUP)
}

// PID returns the gateway's process ID, or 0 once it has been stopped.
func (g *Gateway) PID() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return 0
	}
	return g.cmd.Process.Pid
}

// Logs returns everything the gateway has written so far.
func (g *Gateway) Logs() string {
	b, _ := os.ReadFile(g.logPath)
	return string(b)
}

// LogTail returns the last lines lines the gateway has written so far.
func (g *Gateway) LogTail(lines int) string { return tail(g.Logs(), lines) }

// RandomPrefix returns a fresh key prefix such as "t3f9a1c2e:".
func RandomPrefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b) + ":"
}

func tail(s string, lines int) string {
	parts := bytes.Split([]byte(strings.TrimRight(s, "\n")), []byte("\n"))
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return string(bytes.Join(parts, []byte("\n")))
}

// listensOn reports whether process pid holds the socket listening on loopback TCP port port
// (from /proc/net/tcp and the process's file descriptors; Linux).
func listensOn(pid, port int) bool {
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false
	}
	local := fmt.Sprintf(":%04X", port)
	inode := ""
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st ... inode: st 0A is LISTEN.
		if len(f) > 9 && strings.HasSuffix(f[1], local) && f[3] == "0A" {
			inode = f[9]
			break
		}
	}
	if inode == "" {
		return false
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && target == want {
			return true
		}
	}
	return false
}
