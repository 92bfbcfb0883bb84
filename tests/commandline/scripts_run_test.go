package commandline

import (
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

// scriptsRun is one run of README's run command (scripts/run) on free ports, with its temporary,
// state and cache directories of its own (the Go build cache stays the shared one: a cold one
// would rebuild everything).
type scriptsRun struct {
	dirs      scriptsRunDirs
	redisPort int
	base      string // the gateway's URL
	cmd       *exec.Cmd
	out       *testkit.LockedBuffer
	exited    chan error
}

// scriptsRunDirs are the directories a scripts/run writes to: TMPDIR (its Redis's data), and
// XDG_STATE_HOME and XDG_CACHE_HOME (its dev secret and its binary).
type scriptsRunDirs struct{ tmp, state, cache string }

func newScriptsRunDirs(t *testing.T) scriptsRunDirs {
	return scriptsRunDirs{tmp: t.TempDir(), state: t.TempDir(), cache: t.TempDir()}
}

// startScriptsRun starts scripts/run with dirs and env added to this process's environment, less
// any LEASEGATE_TOKEN_SECRET, and waits for its gateway to be ready.
func startScriptsRun(t *testing.T, dirs scriptsRunDirs, redisPort, listenPort int, env ...string) *scriptsRun {
	t.Helper()
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(root, "scripts", "run"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEGATE_TOKEN_SECRET=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"LEASEGATE_REDIS_ADDR=127.0.0.1:"+strconv.Itoa(redisPort),
		"LEASEGATE_LISTEN=127.0.0.1:"+strconv.Itoa(listenPort),
		"TMPDIR="+dirs.tmp, "XDG_STATE_HOME="+dirs.state, "XDG_CACHE_HOME="+dirs.cache,
		"GOCACHE="+strings.TrimSpace(string(gocache)))
	cmd.Env = append(cmd.Env, env...)
	s := &scriptsRun{dirs: dirs, redisPort: redisPort, base: "http://127.0.0.1:" + strconv.Itoa(listenPort), cmd: cmd,
		out: &testkit.LockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	require.NoError(t, cmd.Start())
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	harness.Eventually(t, 120*time.Second, "the gateway to answer (it is built first)", func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// stop sends scripts/run SIGTERM and waits until it and its redis-server are gone.
func (s *scriptsRun) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-s.exited:
		require.NoError(t, err, s.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("scripts/run did not stop:\n%s", s.out.String())
	}
	redis := &harness.Redis{Addr: "127.0.0.1:" + strconv.Itoa(s.redisPort)}
	harness.Eventually(t, 10*time.Second, "its redis-server to stop", func() bool {
		_, err := redis.Do("PING")
		return err != nil
	})
}

func freePorts(t *testing.T) (redisPort, listenPort int) {
	t.Helper()
	ports, err := harness.FreePorts(2)
	require.NoError(t, err)
	return ports[0], ports[1]
}

// TestScriptsRunStartsAndStopsItsRedis runs README's run command with a free Redis port: it starts
// redis-server there, serves, and on SIGTERM stops both. Given LEASEGATE_TOKEN_SECRET, it keeps no
// secret of its own; it leaves its binary in its cache directory, and nothing in TMPDIR but its
// Redis's data.
func TestScriptsRunStartsAndStopsItsRedis(t *testing.T) {
	t.Parallel()
	redisPort, listenPort := freePorts(t)
	dirs := newScriptsRunDirs(t)
	s := startScriptsRun(t, dirs, redisPort, listenPort, "LEASEGATE_TOKEN_SECRET="+harness.TestTokenSecret)
	assert.Contains(t, s.out.String(), "starting redis-server on 127.0.0.1:"+strconv.Itoa(redisPort))
	assert.NotContains(t, s.out.String(), "dev secret")
	c := harness.NewClient(t, s.base)
	require.Equal(t, http.StatusCreated, c.Do(http.MethodPost, "/locks/run", nil, testkit.AcquireBody("w", 60000)).Status)
	s.stop(t)

	state, err := os.ReadDir(dirs.state)
	require.NoError(t, err)
	assert.Empty(t, state, "no dev secret kept when LEASEGATE_TOKEN_SECRET is given")
	fi, err := os.Stat(filepath.Join(dirs.cache, "leasegate", "leasegate"))
	require.NoError(t, err, "the binary is in the cache directory")
	assert.True(t, fi.Mode().IsRegular())
	cached, err := os.ReadDir(filepath.Join(dirs.cache, "leasegate"))
	require.NoError(t, err)
	assert.Len(t, cached, 1, "the binary only: no build directory left")
	tmp, err := os.ReadDir(dirs.tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range tmp {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"leasegate-redis-" + strconv.Itoa(redisPort)}, names, "nothing in TMPDIR but the Redis data")
}

// TestScriptsRunKeepsLeasesAcrossRestarts: without LEASEGATE_TOKEN_SECRET, scripts/run signs tokens
// with a dev secret it keeps (a file only its owner can read), so a lease taken before a restart is
// still its holder's after it: inspected as "yours", renewed and released with the old token, where
// a new random secret would answer 400 while Redis kept the lease.
func TestScriptsRunKeepsLeasesAcrossRestarts(t *testing.T) {
	t.Parallel()
	redisPort, listenPort := freePorts(t)
	dirs := newScriptsRunDirs(t)
	s := startScriptsRun(t, dirs, redisPort, listenPort)
	secretFile := filepath.Join(dirs.state, "leasegate", "dev-token-secret")
	assert.Contains(t, s.out.String(), "signed with the dev secret in "+secretFile)
	fi, err := os.Stat(secretFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the secret is its owner's only")
	secret, err := os.ReadFile(secretFile)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(strings.TrimSpace(string(secret))), 32)
	assert.NotContains(t, s.out.String(), strings.TrimSpace(string(secret)), "the secret is not printed")
	assert.NotContains(t, s.out.String(), "LEASEGATE_TOKEN_SECRET is unset: using a random secret", "the gateway got the secret")

	c := harness.NewClient(t, s.base)
	g := c.Do(http.MethodPost, "/locks/kept", nil, testkit.AcquireBody("w", 120000))
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	s.stop(t)

	s = startScriptsRun(t, dirs, redisPort, listenPort)
	again, err := os.ReadFile(secretFile)
	require.NoError(t, err)
	assert.Equal(t, string(secret), string(again), "the same secret after the restart")
	c = harness.NewClient(t, s.base)
	tok := testkit.TokenHeader(g.Str("token"))
	st := c.Do(http.MethodGet, "/locks/kept", tok, "")
	require.Equal(t, http.StatusOK, st.Status, string(st.Body))
	assert.Equal(t, true, st.JSON()["yours"], "the lease survived the restart, and its token is still valid")
	assert.Equal(t, g.Int("fence"), st.Int("fence"))
	require.Equal(t, http.StatusOK, c.Do(http.MethodPost, "/locks/kept/renew", tok, "").Status)
	r := c.Do(http.MethodDelete, "/locks/kept", tok, "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	assert.Equal(t, true, r.JSON()["released"])
	assert.Equal(t, false, c.Do(http.MethodGet, "/locks/kept", nil, "").JSON()["held"])
	s.stop(t)
}
