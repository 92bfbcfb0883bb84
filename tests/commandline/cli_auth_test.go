package commandline

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/cli"
	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// startCLI runs the leasegate binary with args against e's gateway, with the environment env
// (NAME=VALUE; LEASEGATE_* variables of this process are left out); the result arrives on the
// channel once it exits (bounded by 60 s).
func (e *securedEnv) startCLI(t *testing.T, env []string, args ...string) <-chan cliRun {
	t.Helper()
	// A -race binary sleeps a second before a successful exit, unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	return startCLIProcess(t, append([]string{"PATH=" + os.Getenv("PATH"), "GORACE=" + gorace, "LEASEGATE_SERVER=" + e.Gateway.URL}, env...), args...)
}

func (e *securedEnv) cli(t *testing.T, env []string, args ...string) cliRun {
	t.Helper()
	return <-e.startCLI(t, env, args...)
}

// keyFile writes principal name's key into a file only its owner may read, with the newline an
// editor leaves, and returns its path.
func (e *securedEnv) keyFile(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".key")
	require.NoError(t, os.WriteFile(path, []byte(e.Principals[name].Key+"\n"), 0o600))
	return path
}

// TestCLIAuthAPIKeyAndCAFile: the client commands reach an HTTPS gateway that authenticates with
// the API key from --api-key-file, LEASEGATE_API_KEY, LEASEGATE_API_KEY_FILE or --api-key and the CA
// from --ca-file or LEASEGATE_CA_FILE; without the key they exit 3 saying what the 401 said and
// how to give one, a 403 says its detail, and without the CA they say how to trust it.
func TestCLIAuthAPIKeyAndCAFile(t *testing.T) {
	t.Parallel()
	e := newSecuredEnv(t)
	opsKey := e.keyFile(t, "ops")

	r := e.cli(t, nil, "acquire", "--lock", "cli-auth", "--ttl", "1m", "--api-key-file", opsKey, "--ca-file", e.CAFile)
	require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
	var grant struct{ Token string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &grant), r.stdout)
	require.True(t, e.Held(t, "cli-auth"))

	r = e.cli(t, []string{"LEASEGATE_CA_FILE=" + e.CAFile}, "release", "--lock", "cli-auth", "--token", grant.Token)
	assert.Equal(t, cli.ExitFailed, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, testkit.ProbUnauthenticated, "the gateway's problem on stdout")
	assert.Contains(t, r.stderr, "401")
	assert.Contains(t, r.stderr, "send Authorization: Bearer", "the problem's detail")
	assert.Contains(t, r.stderr, "--api-key-file FILE, LEASEGATE_API_KEY_FILE or LEASEGATE_API_KEY")
	assert.True(t, e.Held(t, "cli-auth"), "nothing released without the key")

	r = e.cli(t, []string{"LEASEGATE_CA_FILE=" + e.CAFile}, "run", "--lock", "cli-auth.run", "--", "true")
	assert.Equal(t, cli.ExitFailed, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stderr, "401 Unauthenticated")
	assert.Contains(t, r.stderr, "give it with --api-key-file FILE")

	r = e.cli(t, []string{"LEASEGATE_API_KEY=" + e.Principals["ops"].Key}, "inspect", "--lock", "cli-auth")
	assert.Equal(t, cli.ExitFailed, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stderr, "certificate signed by unknown authority")
	assert.Contains(t, r.stderr, "--ca-file FILE or LEASEGATE_CA_FILE")

	r = e.cli(t, []string{"LEASEGATE_API_KEY=" + e.Principals["ops"].Key, "LEASEGATE_CA_FILE=" + e.CAFile},
		"release", "--lock", "cli-auth", "--token", grant.Token)
	require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
	assert.False(t, e.Held(t, "cli-auth"))

	r = e.cli(t, []string{"LEASEGATE_API_KEY_FILE=" + e.keyFile(t, "billing"), "LEASEGATE_CA_FILE=" + e.CAFile},
		"acquire", "--lock", "orders.42")
	assert.Equal(t, cli.ExitFailed, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stderr, `403 Forbidden: principal "billing" may not use the name "orders.42"`)
	assert.Contains(t, r.stderr, "the API key from LEASEGATE_API_KEY_FILE")

	r = e.cli(t, []string{"LEASEGATE_CA_FILE=" + e.CAFile}, "inspect", "--lock", "billing.a", "--api-key", e.Principals["billing"].Key)
	assert.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, `"held":false`)

	r = e.cli(t, []string{"LEASEGATE_API_KEY=" + e.Principals["billing"].Key, "LEASEGATE_CA_FILE=" + e.CAFile},
		"run", "--lock", "billing.job", "--", "sh", "-c", `echo "fence $LEASEGATE_FENCE"`)
	assert.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "fence ")
	assert.False(t, e.Held(t, "billing.job"), "released at exit")
}

// TestCLIAuthRunWatchesWithTheKey: run's events stream carries the API key, so a force release
// stops the command at once rather than at the next renewal (10 s away).
func TestCLIAuthRunWatchesWithTheKey(t *testing.T) {
	t.Parallel()
	e := newSecuredEnv(t)
	done := e.startCLI(t, []string{"LEASEGATE_API_KEY_FILE=" + e.keyFile(t, "ops"), "LEASEGATE_CA_FILE=" + e.CAFile},
		"run", "--lock", "watched", "--ttl", "30s", "--grace", "1s", "--", "sh", "-c", "while :; do sleep 0.05; done")
	harness.Eventually(t, 10*time.Second, "the command holds the lock", func() bool { return e.Held(t, "watched") })
	r := e.Client.Do(http.MethodDelete, "/locks/watched?force=true", e.As("ops"), "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	select {
	case run := <-done:
		assert.Equal(t, cli.ExitLeaseLost, run.code, run.stderr)
		// The stream tells of the force release, or, opened just after it, answers 410 saying so:
		// both only with the key (without it, 401 until the renewal 10 s later).
		assert.Contains(t, run.stderr, `leasegate: lost the lease on lock "watched": an operator force-released it`)
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop the command within 5 s of the force release")
	}
}

// TestCLIAuthUsageErrors: two sources of one key, or an empty key file, are usage errors.
func TestCLIAuthUsageErrors(t *testing.T) {
	t.Parallel()
	e := &securedEnv{&testkit.SecuredEnv{Gateway: &harness.Gateway{URL: "http://127.0.0.1:1"}}}
	empty := filepath.Join(t.TempDir(), "empty.key")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--api-key", "k", "--api-key-file", empty}, "exclude each other"},
		{[]string{"LEASEGATE_API_KEY=k", "LEASEGATE_API_KEY_FILE=" + empty}, nil, "both set"},
		{nil, []string{"--api-key-file", empty}, "is empty"},
		{nil, []string{"--ca-file", empty}, "no PEM certificate"},
	} {
		r := e.cli(t, tc.env, append([]string{"inspect", "--lock", "a"}, tc.args...)...)
		assert.Equal(t, cli.ExitUsage, r.code, "%v %v: %s", tc.env, tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want)
	}
}

// TestCLIAuthKey: auth-key prints the key and its hash line on stdout, and nothing else there, so
// that `leasegate auth-key | grep hash` keeps the hash line alone; the advice goes to stderr.
func TestCLIAuthKey(t *testing.T) {
	t.Parallel()
	r := <-startCLIProcess(t, bareEnviron(), "auth-key")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 2, "stdout:\n%s", r.stdout)
	key, ok := strings.CutPrefix(lines[0], "key:  ")
	require.True(t, ok, lines[0])
	assert.Equal(t, `hash: "`+auth.HashKey(key)+`"`, lines[1])
	var withHash []string
	for _, line := range lines {
		if strings.Contains(line, "hash") {
			withHash = append(withHash, line)
		}
	}
	assert.Equal(t, lines[1:], withHash, "grep hash: the hash line alone")
	assert.Contains(t, r.stderr, "Add the hash to the principal's \"keys\" in the auth file")
	assert.NotContains(t, r.stderr, key)
}
