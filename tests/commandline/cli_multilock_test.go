package commandline

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// The CLI with multi-locks: run and acquire with --lock repeated, renew and release --multilock ID.

// memberState reads lock's state: whether it is held, and by which multi-lock ("" for none).
func (e *env) memberState(lock string) (held bool, multilock string) {
	st := e.Client.Do(http.MethodGet, "/locks/"+lock, nil, "")
	return st.JSON()["held"] == true, st.Str("multilock")
}

// readEnvFile reads the NAME=value lines a command wrote with env(1) into a map.
func readEnvFile(path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// TestCLIRunMultiLockHoldsEveryLockWhileTheCommandRuns: run --lock a --lock b holds both as one
// multi-lock while the command runs (renewed past its 1 s TTL), tells the command the group's id,
// members and fences, keeps others out, and frees both when the command exits, passing on its code.
func TestCLIRunMultiLockHoldsEveryLockWhileTheCommandRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	dir := t.TempDir()
	envFile, stop := filepath.Join(dir, "env"), filepath.Join(dir, "stop")
	// The command records its environment, then waits for the stop file and exits 5.
	script := `env | grep ^LEASEGATE_ > "$0.tmp" && mv "$0.tmp" "$0"; while [ ! -e "$1" ]; do sleep 0.05; done; exit 5`
	done := e.startCLI(t, "run", "--lock", "beta", "--lock", "alpha", "--ttl", "2s", "--", "sh", "-c", script, envFile, stop)
	var vars map[string]string
	harness.Eventually(t, 10*time.Second, "the command to start", func() bool {
		vars = readEnvFile(envFile)
		return vars != nil
	})
	id := vars["LEASEGATE_MULTILOCK"]
	assert.True(t, strings.HasPrefix(id, "m-"), "LEASEGATE_MULTILOCK=%q", id)
	assert.Equal(t, "alpha beta", vars["LEASEGATE_LOCKS"], "name order")
	assert.Equal(t, "exclusive", vars["LEASEGATE_MODE"])
	assert.NotEmpty(t, vars["LEASEGATE_TOKEN"])
	assert.NotContains(t, vars, "LEASEGATE_LOCK")
	fences := strings.Fields(vars["LEASEGATE_FENCES"])
	require.Len(t, fences, 2, vars["LEASEGATE_FENCES"])
	for i, lock := range []string{"alpha", "beta"} {
		st := e.Client.Do(http.MethodGet, "/locks/"+lock, nil, "")
		assert.Equal(t, lock+"="+st.JSON()["fence"].(json.Number).String(), fences[i])
	}

	// Held by the group, renewed every ttl/3: still held well past its 2 s TTL (1 s left the
	// renewals too little room on a loaded machine).
	for start := time.Now(); time.Since(start) < 5*time.Second; <-time.After(100 * time.Millisecond) {
		for _, lock := range []string{"alpha", "beta"} {
			held, by := e.memberState(lock)
			require.True(t, held, lock)
			require.Equal(t, id, by, lock)
		}
	}
	// Others are kept out: a run on one member, and a run of a group overlapping it.
	r := e.cli(t, "run", "--lock", "beta", "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	r = e.cli(t, "run", "--lock", "beta", "--lock", "gamma", "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, `leasegate: multi-lock ["beta" "gamma"] not granted: has 0 of 2; "beta" held by `)
	held, _ := e.memberState("gamma")
	assert.False(t, held, "all or nothing")

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	r = <-done
	assert.Equal(t, 5, r.code, r.stderr)
	assert.False(t, e.Held("alpha"), "released at exit")
	assert.False(t, e.Held("beta"), "released at exit")
}

// TestCLIRunMultiLockWaitsThenRuns: a shared multi-lock run waits for a member held exclusively,
// then runs with every member held shared; a second shared run holds them beside it.
func TestCLIRunMultiLockWaitsThenRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.Hold(t, e.Client, "m1", "holder", 60000)
	dir := t.TempDir()
	stop := filepath.Join(dir, "stop")
	script := `[ "$LEASEGATE_MODE" = shared ] || exit 8; touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done`
	first := e.startCLI(t, "run", "--lock", "m1", "--lock", "m2", "--shared", "--wait", "20s", "--",
		"sh", "-c", script, filepath.Join(dir, "started-1"), stop)
	harness.Eventually(t, 10*time.Second, "the run in m1's line", func() bool { return e.Waiters(t, "m1") == 1 })
	assert.False(t, fileExists(filepath.Join(dir, "started-1")), "the command waits for the locks")
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/m1", testkit.TokenHeader(a.Str("token")), "").Status)
	harness.Eventually(t, 10*time.Second, "the first command to start", func() bool { return fileExists(filepath.Join(dir, "started-1")) })

	second := e.startCLI(t, "run", "--lock", "m2", "--lock", "m1", "--shared", "--", "sh", "-c", script, filepath.Join(dir, "started-2"), stop)
	harness.Eventually(t, 10*time.Second, "the second command to start", func() bool { return fileExists(filepath.Join(dir, "started-2")) })
	for _, lock := range []string{"m1", "m2"} {
		st := e.Client.Do(http.MethodGet, "/locks/"+lock, nil, "")
		assert.Equal(t, "shared", st.Str("mode"), lock)
		assert.Equal(t, int64(2), st.Int("holder_count"), lock)
	}
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	for i, done := range []<-chan cliRun{first, second} {
		r := <-done
		assert.Equal(t, 0, r.code, "run %d: %s", i+1, r.stderr)
	}
	assert.False(t, e.Held("m1"))
	assert.False(t, e.Held("m2"))
}

// TestCLIRunMultiLockStopsTheCommandWhenAMemberIsLost: a member's key vanishing (as if it had
// expired) makes the next renewal answer 410: the command gets SIGTERM, run exits 76, and the other
// member is free.
func TestCLIRunMultiLockStopsTheCommandWhenAMemberIsLost(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "deletes a member's key on the Redis")
	e := newEnv(t, nil)
	dir := t.TempDir()
	started, termFile := filepath.Join(dir, "started"), filepath.Join(dir, "terminated")
	script := `touch "$0"; trap 'touch "$1"; exit 0' TERM; while true; do sleep 0.05; done`
	done := e.startCLI(t, "run", "--lock", "l1", "--lock", "l2", "--ttl", "2s", "--grace", "300ms", "--", "sh", "-c", script, started, termFile)
	harness.Eventually(t, 10*time.Second, "the command to start", func() bool { return fileExists(started) })
	e.Redis.MustDo(t, "DEL", e.Gateway.KeyPrefix+"{l1}")
	r := <-done
	assert.Equal(t, 76, r.code, r.stderr)
	assert.Contains(t, r.stderr, "lost the lease")
	assert.Contains(t, r.stderr, `multi-lock ["l1" "l2"]`)
	assert.True(t, fileExists(termFile), "the command got SIGTERM")
	assert.False(t, e.Held("l2"), "the gateway freed the other member")
}

// TestCLIScriptCommandsMultiLock: acquire --lock a --lock b prints the group's grant; an
// overlapping acquire is "not acquired" (75) and names the held member; renew and release take
// --multilock ID --token T; a waiting acquire gets the locks once they are freed.
func TestCLIScriptCommandsMultiLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	type grant struct {
		ID    string `json:"id"`
		Token string `json:"token"`
		Mode  string `json:"mode"`
		TtlMs int64  `json:"ttl_ms"`
		Locks []struct {
			Lock  string `json:"lock"`
			Fence int64  `json:"fence"`
		} `json:"locks"`
	}
	r := e.cli(t, "acquire", "--lock", "b", "--lock", "a", "--owner", "script", "--ttl", "30s")
	require.Equal(t, 0, r.code, r.stderr)
	var g grant
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &g), r.stdout)
	assert.True(t, strings.HasPrefix(g.ID, "m-"), g.ID)
	assert.Equal(t, "exclusive", g.Mode)
	require.Len(t, g.Locks, 2)
	assert.Equal(t, "a", g.Locks[0].Lock)
	assert.Equal(t, "b", g.Locks[1].Lock)
	_, by := e.memberState("a")
	assert.Equal(t, g.ID, by)

	r = e.cli(t, "acquire", "--lock", "c", "--lock", "b", "--owner", "other")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stdout, "urn:leasegate:problem:lock-held")
	assert.Contains(t, r.stdout, `"locks":["b"]`)

	r = e.cli(t, "renew", "--multilock", g.ID, "--token", g.Token, "--ttl", "1m")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"ttl_ms":60000`)
	r = e.cli(t, "inspect", "--lock", "b")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"multilock":"`+g.ID+`"`)

	// A waiting acquire of an overlapping group gets it once the first is released.
	waiter := e.startCLI(t, "acquire", "--lock", "b", "--lock", "c", "--owner", "waiter", "--wait", "20s")
	harness.Eventually(t, 10*time.Second, "the waiter in b's line", func() bool { return e.Waiters(t, "b") == 1 })
	r = e.cli(t, "release", "--multilock", g.ID, "--token", g.Token)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"released":true`)
	w := <-waiter
	require.Equal(t, 0, w.code, w.stderr)
	var g2 grant
	require.NoError(t, json.Unmarshal([]byte(w.stdout), &g2), w.stdout)
	_, by = e.memberState("c")
	assert.Equal(t, g2.ID, by)
	assert.False(t, e.Held("a"))

	// Released twice: lease-gone.
	r = e.cli(t, "release", "--multilock", g.ID, "--token", g.Token)
	assert.Equal(t, 3, r.code, r.stdout)
	assert.Contains(t, r.stdout, "urn:leasegate:problem:lease-gone")
	// A lock's endpoints refuse the group's token, and the other way round.
	r = e.cli(t, "release", "--lock", "b", "--token", g2.Token)
	assert.Equal(t, 3, r.code, r.stdout)
	assert.Contains(t, r.stdout, "urn:leasegate:problem:invalid-lease-token")
	r = e.cli(t, "release", "--multilock", g2.ID, "--token", g.Token)
	assert.Equal(t, 3, r.code, r.stdout)
	assert.Contains(t, r.stdout, "urn:leasegate:problem:invalid-lease-token")
	r = e.cli(t, "release", "--multilock", g2.ID, "--token", g2.Token)
	require.Equal(t, 0, r.code, r.stdout)
	assert.False(t, e.Held("b"))
	assert.False(t, e.Held("c"))
}

// TestCLIMultiLockFlagMisuse: several --lock only where a hold is taken, distinct, and not with
// --token; --multilock alone, without --mode or --permits. Each is a usage error (2) that says what
// is wrong, before anything is taken or run.
func TestCLIMultiLockFlagMisuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--lock", "x", "--lock", "x", "--", "touch", marker}, `--lock "x" given twice`},
		{[]string{"run", "--lock", "x", "--lock", "y", "--semaphore", "s", "--permits", "2", "--", "touch", marker}, "--lock and --semaphore exclude each other"},
		{[]string{"acquire", "--lock", "x", "--lock", "y", "--token", "t"}, "a multi-lock cannot be re-entered"},
		{[]string{"release", "--lock", "x", "--lock", "y", "--token", "t"}, "give one --lock: a multi-lock's locks are renewed and given back together, with --multilock ID"},
		{[]string{"renew", "--lock", "x", "--lock", "y", "--token", "t"}, "with --multilock ID"},
		{[]string{"inspect", "--lock", "x", "--lock", "y"}, "give one --lock"},
		{[]string{"release", "--multilock", "m-1", "--lock", "x", "--token", "t"}, "--multilock excludes --lock and --semaphore"},
		{[]string{"release", "--multilock", "m-1", "--mode", "shared", "--token", "t"}, "--mode is for locks"},
		{[]string{"renew", "--multilock", "m-1", "--permits", "2", "--token", "t"}, "--permits goes with --semaphore, not --multilock"},
		{[]string{"run", "--multilock", "m-1", "--", "touch", marker}, "flag provided but not defined: -multilock"},
		{[]string{"release", "--token", "t"}, "--lock is required, or --semaphore, or --multilock"},
	} {
		r := e.cli(t, c.args...)
		assert.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.want, "%v", c.args)
		assert.Contains(t, r.stderr, "usage: leasegate "+c.args[0], "%v", c.args)
		assert.Empty(t, r.stdout, "%v", c.args)
	}
	assert.False(t, fileExists(marker), "no command ran")
	assert.False(t, e.Held("x"), "no lock taken")

	for _, sub := range []string{"run", "acquire"} {
		r := e.cli(t, sub, "--help")
		assert.Contains(t, r.stderr, "--lock NAME [--lock NAME...]", sub)
	}
	for _, sub := range []string{"release", "renew"} {
		r := e.cli(t, sub, "--help")
		assert.Contains(t, r.stderr, "--multilock ID", sub)
	}
}

// TestCLIMultiLockKeepsItsPlaceAcrossLongPolls: with the gateway capping long-polls to 300 ms, a
// waiting multi-lock's acquire (the command line's own loop) and run (the Go SDK's) go on from one
// long-poll to the next with its queue ticket: each stays ahead of a single waiter that queued
// after it, under the same group id and arrival, and gets the locks when the holder releases.
func TestCLIMultiLockKeepsItsPlaceAcrossLongPolls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]string{"LEASEGATE_MAX_WAIT": "300ms", "LEASEGATE_ACCESS_LOG": "all"})
	for _, tc := range []struct {
		name    string
		command func(a, b string) []string
		id      func(r cliRun) string // the id of the group it was granted
	}{
		{"acquire", func(a, b string) []string {
			return []string{"acquire", "--lock", b, "--lock", a, "--owner", "group", "--ttl", "30s", "--wait", "20s"}
		}, func(r cliRun) string {
			var g struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal([]byte(r.stdout), &g)
			return g.ID
		}},
		{"run", func(a, b string) []string {
			return []string{"run", "--lock", b, "--lock", a, "--owner", "group", "--ttl", "30s", "--wait", "20s", "--",
				"sh", "-c", `echo "$LEASEGATE_MULTILOCK"`}
		}, func(r cliRun) string { return strings.TrimSpace(r.stdout) }},
	} {
		a, b := "place."+tc.name+".a", "place."+tc.name+".b"
		holder := e.Hold(t, e.Client, b, "holder", 60000)
		group := e.startCLI(t, tc.command(a, b)...)
		var in testkit.ListedWaiter
		harness.Eventually(t, 10*time.Second, tc.name+": the group in b's line", func() bool {
			ws := testkit.Waiting(e.Client, b)
			if len(ws) == 1 && ws[0].Multilock != "" {
				in = ws[0]
				return true
			}
			return false
		})
		later := make(chan *harness.Response, 1)
		go func() { // a single waiter, keeping its own place across the capped long-polls
			ticket := ""
			for {
				r := e.Client.Do(http.MethodPost, "/locks/"+b, nil, fmt.Sprintf(`{"owner":"later","ttl_ms":60000,"wait_ms":20000,"queue_ticket":%q}`, ticket))
				if ticket = r.Str("queue_ticket"); r.Status != http.StatusConflict || ticket == "" {
					later <- r
					return
				}
			}
		}()
		polls := func() int { return strings.Count(e.Gateway.Logs(), `"path":"/multilocks","status":409`) }
		harness.Eventually(t, 10*time.Second, tc.name+": the later waiter in line", func() bool {
			return slices.ContainsFunc(testkit.Waiting(e.Client, b), func(w testkit.ListedWaiter) bool { return w.Owner == "later" })
		})
		since := polls()
		harness.Eventually(t, 10*time.Second, tc.name+": two more long-polls to run out", func() bool { return polls() >= since+2 })
		// Release right after a long-poll ran out and the next is back in line: well within its 300 ms.
		since = polls()
		harness.Eventually(t, 5*time.Second, tc.name+": a long-poll to run out", func() bool { return polls() > since })
		harness.Eventually(t, 5*time.Second, tc.name+": the group back first in line, as it came", func() bool {
			ws := testkit.Waiting(e.Client, b)
			return len(ws) == 2 && ws[0] == in && ws[1].Owner == "later"
		})
		require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/"+b, testkit.TokenHeader(holder.Str("token")), "").Status)
		r := testkit.Receive(t, group, 10*time.Second, tc.name+": the group's answer")
		require.Equal(t, 0, r.code, "%s: %s", tc.name, r.stderr)
		assert.Equal(t, in.Multilock, tc.id(r), "%s: the same group from its first long-poll to its grant", tc.name)
		if tc.name == "acquire" {
			var g struct {
				Token string `json:"token"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &g), r.stdout)
			require.Equal(t, 0, e.cli(t, "release", "--multilock", in.Multilock, "--token", g.Token).code)
		}
		l := testkit.Receive(t, later, 10*time.Second, tc.name+": b for the later waiter, after the group")
		require.Equal(t, http.StatusCreated, l.Status, "%s: %s", tc.name, l.Body)
	}
}
