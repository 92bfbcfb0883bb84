package commandline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// cliRun is one finished CLI invocation.
type cliRun struct {
	code           int
	stdout, stderr string
}

// startCLI runs the leasegate binary with args against e's gateway; the result arrives on the
// channel once it exits (bounded by 60 s).
func (e *env) startCLI(t *testing.T, args ...string) <-chan cliRun {
	t.Helper()
	return startCLIProcess(t, e.cliEnv(), args...)
}

// cliEnv is the environment tests run the leasegate binary in: this process's, with e's gateway
// as LEASEGATE_SERVER and GORACE's atexit_sleep_ms=0. A binary built with -race otherwise sleeps
// a second as it exits, and so does the guardian that run and elect start (guard.go), which holds
// their stderr open until it has exited.
func (e *env) cliEnv() []string {
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	return append(os.Environ(), "LEASEGATE_SERVER="+e.Gateway.URL, "GORACE="+gorace)
}

// startCLIProcess runs the leasegate binary with args and the environment environ (NAME=VALUE);
// the result arrives on the channel once it exits (bounded by 60 s).
func startCLIProcess(t *testing.T, environ []string, args ...string) <-chan cliRun {
	t.Helper()
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	out := make(chan cliRun, 1)
	go func() {
		defer cancel()
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		out <- cliRun{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}()
	return out
}

func (e *env) cli(t *testing.T, args ...string) cliRun {
	t.Helper()
	return <-e.startCLI(t, args...)
}

func TestCLIRunPassesExitCodeAndReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.cli(t, "run", "--lock", "job", "--", "sh", "-c", `test -n "$LEASEGATE_FENCE" && echo "fence $LEASEGATE_FENCE"; exit 7`)
	assert.Equal(t, 7, r.code, r.stderr)
	assert.Contains(t, r.stdout, "fence ")
	assert.False(t, e.Held("job"), "released at exit")

	r = e.cli(t, "run", "--lock", "job", "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
}

func TestCLIRunHoldsTheLockWhileTheCommandRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	dir := t.TempDir()
	stop := filepath.Join(dir, "stop")
	done := e.startCLI(t, "run", "--lock", "busy", "--ttl", "2s", "--",
		"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done`, stop)
	harness.Eventually(t, 10*time.Second, "the command holds the lock", func() bool { return e.Held("busy") })
	// Renewed every ttl/3: still held well past its 2 s TTL (a TTL of 1 s left the renewals too
	// little room on a machine at load 10-20, where run rightly stopped the command).
	start := time.Now()
	for time.Since(start) < 4500*time.Millisecond {
		require.True(t, e.Held("busy"))
		<-time.After(100 * time.Millisecond)
	}
	// Someone else cannot take it, and a second run fails to acquire without --wait.
	other := e.cli(t, "run", "--lock", "busy", "--", "true")
	assert.Equal(t, 75, other.code, other.stderr)
	assert.Contains(t, other.stderr, "held")

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	r := <-done
	assert.Equal(t, 0, r.code, r.stderr)
	assert.False(t, e.Held("busy"))
}

func TestCLIRunWaitsForAHeldLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.Hold(t, e.Client, "queue", "a", 60000)
	done := e.startCLI(t, "run", "--lock", "queue", "--wait", "20s", "--", "sh", "-c", "exit 3")
	harness.Eventually(t, 10*time.Second, "the CLI waits in line", func() bool { return e.Waiters(t, "queue") == 1 })
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/queue", testkit.TokenHeader(a.Str("token")), "").Status)
	r := <-done
	assert.Equal(t, 3, r.code, r.stderr)
	assert.False(t, e.Held("queue"))
}

func TestCLIRunStopsTheCommandWhenTheLeaseIsLost(t *testing.T) {
	testkit.StandaloneOnly(t, "deletes the lease's key on the Redis")
	for _, how := range []string{"released", "expired"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			dir := t.TempDir()
			tokenFile, termFile := filepath.Join(dir, "token"), filepath.Join(dir, "terminated")
			// The command records its token, then waits; on SIGTERM it notes it and exits.
			script := `echo "$LEASEGATE_TOKEN" > "$0.tmp" && mv "$0.tmp" "$0"; trap 'touch "$1"; exit 0' TERM; while true; do sleep 0.05; done`
			done := e.startCLI(t, "run", "--lock", "lost", "--ttl", "2s", "--grace", "300ms", "--", "sh", "-c", script, tokenFile, termFile)
			var token []byte
			harness.Eventually(t, 10*time.Second, "the command to start", func() bool {
				var err error
				token, err = os.ReadFile(tokenFile)
				return err == nil && len(token) > 0
			})
			if how == "released" {
				r := e.Client.Do(http.MethodDelete, "/locks/lost", testkit.TokenHeader(strings.TrimSpace(string(token))), "")
				require.Equal(t, http.StatusOK, r.Status)
			} else {
				e.Redis.MustDo(t, "DEL", e.Gateway.KeyPrefix+"{lost}") // as if it had expired
			}
			r := <-done
			assert.Equal(t, 76, r.code, r.stderr)
			assert.Contains(t, r.stderr, `leasegate: lost the lease on lock "lost": `)
			assert.NotContains(t, r.stderr, "force-released it", "nobody forced it")
			_, err := os.Stat(termFile)
			assert.NoError(t, err, "the command got SIGTERM")
		})
	}
}

func TestCLIRunRefusesAGraceThatCannotFit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.cli(t, "run", "--lock", "g", "--ttl", "1s", "--grace", "1s", "--", "true")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "does not fit")
	assert.False(t, e.Held("g"), "nothing was acquired")
}

func TestCLIScriptCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.cli(t, "acquire", "--lock", "s", "--owner", "script", "--ttl", "30s")
	require.Equal(t, 0, r.code, r.stderr)
	var g struct {
		Token string `json:"token"`
		Fence int64  `json:"fence"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &g))
	assert.Positive(t, g.Fence)

	r = e.cli(t, "acquire", "--lock", "s", "--owner", "other")
	assert.Equal(t, 75, r.code)
	assert.Contains(t, r.stdout, "urn:leasegate:problem:lock-held")

	r = e.cli(t, "renew", "--lock", "s", "--token", g.Token, "--ttl", "1m")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"ttl_ms":60000`)

	r = e.cli(t, "inspect", "--lock", "s", "--token", g.Token)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"yours":true`)

	r = e.cli(t, "release", "--lock", "s", "--token", g.Token)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"released":true`)

	r = e.cli(t, "release", "--lock", "s", "--token", g.Token)
	assert.Equal(t, 3, r.code)
	assert.Contains(t, r.stdout, "urn:leasegate:problem:lease-gone")

	r = e.cli(t, "run", "--", "true")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--lock is required")
}

// TestCLIRunStopsTheCommandBeforeTheLeaseCanLapse kills (kill -9) the gateway replica through
// which `leasegate run` holds a lock, while another client waits for the lock on a second replica.
// The command ignores SIGTERM, so run must SIGKILL it, and it must be gone before the waiter's
// 201: a command still running when someone else holds the lock is two holders at once.
func TestCLIRunStopsTheCommandBeforeTheLeaseCanLapse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	c2 := harness.NewClient(t, gw2.URL)
	done, pid := e.startStubborn(t, "run", "--lock", "lapse", "--ttl", "2s")
	granted := make(chan time.Time, 1)
	go func() {
		r := c2.Do(http.MethodPost, "/locks/lapse", nil, `{"owner":"next","ttl_ms":30000,"wait_ms":20000}`)
		if r.Status == http.StatusCreated {
			granted <- time.Now()
		}
		close(granted)
	}()
	harness.Eventually(t, 10*time.Second, "the next holder in line", func() bool { return e.Waiters(t, "lapse") == 1 })
	require.NoError(t, e.Gateway.Kill())

	gone := awaitGone(t, pid)
	next, ok := <-granted
	require.True(t, ok, "the next holder was granted the lock")
	assert.True(t, gone.Before(next), "the command was gone (%v) before the next holder's 201 (%v)", gone.Format("15:04:05.000"), next.Format("15:04:05.000"))
	r := <-done
	assert.Equal(t, 76, r.code, r.stderr)
	assert.Contains(t, r.stderr, "killing it")
}

// TestCLIManners checks help, version, exit codes and error messages as a new user meets them.
func TestCLIManners(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"serve", "--help"}, {"healthcheck", "--help"}} {
		r := e.cli(t, args...)
		assert.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stdout, "Usage:", "%v", args)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := e.cli(t, args...)
		assert.Equal(t, 0, r.code, "%v", args)
		assert.True(t, strings.HasPrefix(r.stdout, "leasegate "), "%v: %q", args, r.stdout)
	}
	for _, sub := range []string{"run", "elect", "acquire", "release", "renew", "inspect"} {
		r := e.cli(t, sub, "--help")
		assert.Equal(t, 0, r.code, "%s --help", sub)
		assert.Contains(t, r.stderr, "usage: leasegate "+sub)
	}
	// As shells do: 127 for a missing command, 126 for one that cannot be run; no lock taken.
	r := e.cli(t, "run", "--lock", "m", "--", "/no/such/command")
	assert.Equal(t, 127, r.code, r.stderr)
	noexec := filepath.Join(t.TempDir(), "noexec")
	require.NoError(t, os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644))
	r = e.cli(t, "run", "--lock", "m", "--", noexec)
	assert.Equal(t, 126, r.code, r.stderr)
	assert.False(t, e.Held("m"))

	// --server without a scheme; errors printed once, with the problem's invalid_params.
	host := strings.TrimPrefix(e.Gateway.URL, "http://")
	r = e.cli(t, "acquire", "--lock", "m", "--server", host, "--ttl", "2h")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stdout+r.stderr, "ttl_ms")
	assert.NotContains(t, r.stderr, "leasegate: leasegate:")
	r = e.cli(t, "acquire", "--lock", "m", "--server", host)
	assert.Equal(t, 0, r.code, r.stderr)

	// A bad lock name's reason is said once (the problem's detail and its invalid_params carry
	// the same text).
	r = e.cli(t, "run", "--lock", "bad name", "--", "true")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, `may contain only`), "the reason once:\n%s", r.stderr)

	// A bad flag or a missing one: what is wrong, the synopsis and where the flags are listed,
	// not the whole list (--help has it).
	for _, args := range [][]string{{"run", "--lock", "u", "--bogus", "--", "true"}, {"acquire", "--lock", "u", "--ttl", "soon"},
		{"inspect"}, {"run", "--lock", "u"}} {
		r := e.cli(t, args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "usage: leasegate "+args[0]+" ", "%v", args)
		assert.Contains(t, r.stderr, "(leasegate "+args[0]+" --help lists every flag)", "%v", args)
		assert.NotContains(t, r.stderr, "-api-key-file", "%v: no flag list:\n%s", args, r.stderr)
		assert.Equal(t, 2, strings.Count(strings.TrimSpace(r.stderr), "\n"), "%v: three lines:\n%s", args, r.stderr)
	}
	r = e.cli(t, "run", "--lock", "u", "--bogus", "--", "true")
	assert.True(t, strings.HasPrefix(r.stderr, "leasegate: flag provided but not defined: -bogus\n"), r.stderr)
	r = e.cli(t, "run", "--help")
	assert.Contains(t, r.stderr, "-api-key-file", "--help lists every flag")
	assert.NotContains(t, r.stderr, "lists every flag")
	assert.False(t, e.Held("u"))
}

// TestCLIRunRenewsThroughAnotherReplica gives run two replicas and kills (kill -9) the one that
// granted the lease: renewals go through the other, so the command keeps its lock, and the release
// at the end goes through it too.
func TestCLIRunRenewsThroughAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	c2 := harness.NewClient(t, gw2.URL)
	stop := filepath.Join(t.TempDir(), "stop")
	done := e.startCLI(t, "run", "--lock", "two", "--ttl", "2s", "--server", e.Gateway.URL+","+gw2.URL, "--",
		"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done`, stop)
	harness.Eventually(t, 10*time.Second, "the command holds the lock", func() bool {
		return c2.Do(http.MethodGet, "/locks/two", nil, "").JSON()["held"] == true
	})
	fence := c2.Do(http.MethodGet, "/locks/two", nil, "").Int("fence")
	require.NoError(t, e.Gateway.Kill())
	for start := time.Now(); time.Since(start) < 4500*time.Millisecond; <-time.After(100 * time.Millisecond) {
		st := c2.Do(http.MethodGet, "/locks/two", nil, "")
		require.Equal(t, true, st.JSON()["held"], "renewed through the other replica")
		require.Equal(t, fence, st.Int("fence"))
	}
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	r := <-done
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, false, c2.Do(http.MethodGet, "/locks/two", nil, "").JSON()["held"], "released through the other replica")
}

// TestCLIScriptCommandsTryTheNextReplica gives acquire, renew and release a dead replica first:
// each call is retried, with its Idempotency-Key, through the next.
func TestCLIScriptCommandsTryTheNextReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	dead, err := harness.FreePort()
	require.NoError(t, err)
	servers := "127.0.0.1:" + strconv.Itoa(dead) + "," + e.Gateway.URL
	a := e.cli(t, "acquire", "--lock", "next", "--server", servers)
	require.Equal(t, 0, a.code, a.stderr)
	var g struct{ Token string }
	require.NoError(t, json.Unmarshal([]byte(a.stdout), &g))
	r := e.cli(t, "renew", "--lock", "next", "--token", g.Token, "--server", servers)
	assert.Equal(t, 0, r.code, r.stderr)
	r = e.cli(t, "release", "--lock", "next", "--token", g.Token, "--server", servers)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"released":true`)
	assert.False(t, e.Held("next"))
}

// TestCLIRunAfterALongWaitKeepsTheCommand waits longer than the TTL for a held lock: the command
// must run to its end, not be stopped at once as if its new lease were already lapsing.
func TestCLIRunAfterALongWaitKeepsTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.Hold(t, e.Client, "long-wait", "holder", 2500) // expires in 2.5 s
	r := e.cli(t, "run", "--lock", "long-wait", "--wait", "10s", "--ttl", "2s", "--", "sh", "-c", "sleep 1; exit 4")
	assert.Equal(t, 4, r.code, r.stderr)
}

// startStubborn starts the CLI with args and, as its command, a shell that ignores SIGTERM, and
// returns the CLI's run and the command's process ID once it started.
func (e *env) startStubborn(t *testing.T, args ...string) (<-chan cliRun, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; trap '' TERM; while true; do sleep 0.05; done`
	done := e.startCLI(t, append(args, "--", "sh", "-c", script, pidFile)...)
	var pid int
	harness.Eventually(t, 10*time.Second, "the command to start", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return done, pid
}

// awaitGone waits for process pid to be gone and returns about when it went.
func awaitGone(t *testing.T, pid int) time.Time {
	t.Helper()
	var gone time.Time
	harness.Eventually(t, 15*time.Second, "the command to be gone", func() bool {
		if syscall.Kill(pid, 0) == nil {
			return false
		}
		gone = time.Now()
		return true
	})
	return gone
}
