package commandline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestCLIOnOneGateway runs the operator's commands (list, force-release, watch, observe) and what
// run, elect and acquire say while and after they wait against one gateway (a gateway and its
// Redis cost more CPU than most of these tests), each subtest on names of its own prefix.
func TestCLIOnOneGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for name, test := range map[string]func(t *testing.T, e *env){
		"list":          testCLIList,
		"force-release": testCLIForceRelease,
		"watch":         testCLIWatch,
		"observe":       testCLIObserve,
		"wait-ran-out":  testCLIWaitSaysHowLongItWaited,
		"wait-progress": testCLIWaitShowsProgressOnATerminal,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, e)
		})
	}
}

// liveCLI is a leasegate process whose output the test reads while it runs.
type liveCLI struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan cliRun
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startLive starts the leasegate binary with args against e's gateway; it is killed when t ends
// if still running.
func (e *env) startLive(t *testing.T, args ...string) *liveCLI {
	t.Helper()
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)
	l := &liveCLI{cmd: exec.Command(bin, args...), done: make(chan cliRun, 1)}
	l.cmd.Env, l.cmd.Stdout, l.cmd.Stderr = e.cliEnv(), &l.stdout, &l.stderr
	require.NoError(t, l.cmd.Start())
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = l.cmd.Wait()
		l.done <- cliRun{code: l.cmd.ProcessState.ExitCode(), stdout: l.stdout.String(), stderr: l.stderr.String()}
	}()
	t.Cleanup(func() { _ = l.cmd.Process.Kill(); <-exited })
	return l
}

// lines are the complete lines the process has written to stdout.
func (l *liveCLI) lines() []string {
	out := l.stdout.String()
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		return strings.Split(out[:i], "\n")
	}
	return nil
}

// await waits until stdout has n lines, and requires the nth to match pattern; it returns it.
func (l *liveCLI) await(t *testing.T, n int, pattern string) string {
	t.Helper()
	testkit.EventuallyPaced(t, 10*time.Second, fmt.Sprintf("line %d of %v", n, l.cmd.Args[1:]), func() bool { return len(l.lines()) >= n })
	line := l.lines()[n-1]
	require.Regexp(t, pattern, line, "line %d of:\n%s\nstderr:\n%s", n, l.stdout.String(), l.stderr.String())
	return line
}

// stop sends the process SIGTERM and returns how it ended.
func (l *liveCLI) stop(t *testing.T) cliRun {
	t.Helper()
	require.NoError(t, l.cmd.Process.Signal(syscall.SIGTERM))
	return testkit.Receive(t, l.done, 10*time.Second, "the process's exit after SIGTERM")
}

// at matches an event's time at the start of a line.
const at = `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `

// dur matches a duration as the command line writes it (0.4s, 12s, 1m, 3m12s).
const dur = `[0-9.]+[hms](?:[0-9]+[ms])?`

// waitIn sends a waiting request in a goroutine, abandoned when t ends; it must still wait then.
func (e *env) waitIn(t *testing.T, path, body string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Client.DoContext(ctx, http.MethodPost, path, nil, body)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// count reads a number field of GET path.
func (e *env) count(path, field string) int64 {
	return e.Client.Do(http.MethodGet, path, nil, "").Int(field)
}

// testCLIList: list shows each name held or waited for, one line each (holders with their
// fences, who waits, an election's leader and candidates), all kinds or one, as a table or as
// JSON lines; a listing with nothing in it says so on stderr and exits 0.
func testCLIList(t *testing.T, e *env) {
	e.Hold(t, e.Client, "ls.x", "holder", 60000)
	e.waitIn(t, "/locks/ls.x", testkit.WaitBody("waiter 1", 60000, 30000))
	for _, owner := range []string{"r1", "r2"} {
		r := e.Client.Do(http.MethodPost, "/locks/ls.r", nil, testkit.SharedBody(owner, 60000, 0))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	r := e.Client.Do(http.MethodPost, "/semaphores/ls.pool", nil, testkit.PermitBody("p1", 1, 60000, 0))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	e.waitIn(t, "/semaphores/ls.pool", testkit.PermitBody("p2", 1, 60000, 30000))
	r = e.Client.Do(http.MethodPost, "/elections/ls.sched", nil, `{"owner":"s1","value":"10.0.3.7:8080","ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	e.waitIn(t, "/elections/ls.sched", `{"owner":"s2","value":"b","ttl_ms":60000,"wait_ms":30000}`)
	testkit.EventuallyPaced(t, 10*time.Second, "every waiter in line", func() bool {
		return e.count("/locks/ls.x", "waiters") == 1 && e.count("/semaphores/ls.pool", "waiters") == 1 &&
			e.count("/elections/ls.sched", "candidates") == 1
	})

	l := e.cli(t, "list", "--prefix", "ls.")
	require.Equal(t, 0, l.code, l.stderr)
	lines := strings.Split(strings.TrimSuffix(l.stdout, "\n"), "\n")
	require.Len(t, lines, 5, "a header and one line per name:\n%s", l.stdout)
	assert.Regexp(t, `^KIND +NAME +HELD BY +WAITING$`, lines[0])
	assert.Regexp(t, `^lock +ls\.r +"r1" shared fence \d+, held `+dur+`, `+dur+` left; "r2" shared fence \d+, held `+dur+`, `+dur+` left +-$`, lines[1])
	assert.Regexp(t, `^lock +ls\.x +"holder" fence \d+, held `+dur+`, `+dur+` left +1: "waiter 1" `+dur+`$`, lines[2])
	assert.Regexp(t, `^semaphore +ls\.pool +1 of 1 permits: "p1" fence \d+, held `+dur+`, `+dur+` left +1: "p2" `+dur+`$`, lines[3])
	assert.Regexp(t, `^election +ls\.sched +"s1" value "10\.0\.3\.7:8080", fence \d+, leads for `+dur+`, `+dur+` left +1 candidate$`, lines[4])

	l = e.cli(t, "list", "--prefix", "ls.", "--json")
	require.Equal(t, 0, l.code, l.stderr)
	kinds := map[string]string{}
	var x struct {
		Owner   string `json:"owner"`
		Waiting []struct {
			Owner string `json:"owner"`
		} `json:"waiting"`
	}
	for _, line := range strings.Split(strings.TrimSuffix(l.stdout, "\n"), "\n") {
		var entry struct{ Kind, Name string }
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		kinds[entry.Name] = entry.Kind
		if entry.Name == "ls.x" {
			require.NoError(t, json.Unmarshal([]byte(line), &x), line)
		}
	}
	assert.Equal(t, map[string]string{"ls.r": "lock", "ls.x": "lock", "ls.pool": "semaphore", "ls.sched": "election"}, kinds)
	assert.Equal(t, "holder", x.Owner, "the gateway's entry as it is")
	require.Len(t, x.Waiting, 1)
	assert.Equal(t, "waiter 1", x.Waiting[0].Owner)

	l = e.cli(t, "list", "--prefix", "ls.", "--kind", "election", "--json")
	require.Equal(t, 0, l.code, l.stderr)
	assert.Equal(t, 1, strings.Count(l.stdout, "\n"), l.stdout)
	assert.Contains(t, l.stdout, `"kind":"election","last_event_id":`)

	l = e.cli(t, "list", "--prefix", "ls.none.")
	assert.Equal(t, 0, l.code, l.stderr)
	assert.Empty(t, l.stdout)
	assert.Equal(t, "leasegate: nothing is held or waited for under prefix \"ls.none.\"\n", l.stderr)

	for _, args := range [][]string{{"--kind", "locks"}, {"ls."}} {
		l = e.cli(t, append([]string{"list"}, args...)...)
		assert.Equal(t, 2, l.code, "%v: %s", args, l.stderr)
		assert.Contains(t, l.stderr, "usage: leasegate list ", "%v", args)
	}
	l = e.cli(t, "list", "--prefix", "ls x")
	assert.Equal(t, 3, l.code, l.stderr)
	assert.Contains(t, l.stderr, "400 Invalid request")
}

// testCLIForceRelease: force-release removes every hold of a lock, a semaphore or an election and
// prints each one it removed with its owner and fence, as the gateway's answer lists them (no
// events stream needed); the next in line gets the lock. Nothing held exits 0 too.
func testCLIForceRelease(t *testing.T, e *env) {
	x := e.Hold(t, e.Client, "fr.x", "holder", 60000)
	next := testkit.StartWaiter(e.Client, context.Background(), "fr.x", "next", 60000, 30000)
	testkit.EventuallyPaced(t, 10*time.Second, "the waiter in line", func() bool { return e.Waiters(t, "fr.x") == 1 })
	r := e.cli(t, "force-release", "--lock", "fr.x")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, fmt.Sprintf("force-released lock \"fr.x\": removed the exclusive hold of \"holder\", fence %d\n", x.Int("fence")), r.stdout)
	assert.Empty(t, r.stderr)
	granted := testkit.Receive(t, next, 10*time.Second, "the waiter's grant")
	require.Equal(t, http.StatusCreated, granted.Status, string(granted.Body))

	var fences []int64
	for _, owner := range []string{"r1", "r2"} {
		g := e.Client.Do(http.MethodPost, "/locks/fr.shared", nil, testkit.SharedBody(owner, 60000, 0))
		require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
		fences = append(fences, g.Int("fence"))
	}
	r = e.cli(t, "force-release", "--lock", "fr.shared")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("force-released lock \"fr.shared\": removed the shared hold of \"r1\", fence %d\n", fences[0]))
	assert.Contains(t, r.stdout, fmt.Sprintf("force-released lock \"fr.shared\": removed the shared hold of \"r2\", fence %d\n", fences[1]))
	assert.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)

	p := e.Client.Do(http.MethodPost, "/semaphores/fr.pool", nil, testkit.PermitBody("p1", 2, 60000, 0))
	require.Equal(t, http.StatusCreated, p.Status, string(p.Body))
	r = e.cli(t, "force-release", "--semaphore", "fr.pool")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, fmt.Sprintf("force-released semaphore \"fr.pool\": removed the permit of \"p1\", fence %d\n", p.Int("fence")), r.stdout)

	l := e.Client.Do(http.MethodPost, "/elections/fr.sched", nil, `{"owner":"s1","value":"v","ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, l.Status, string(l.Body))
	r = e.cli(t, "force-release", "--election", "fr.sched")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, fmt.Sprintf("force-released election \"fr.sched\": removed the lead of \"s1\", fence %d\n", l.Int("fence")), r.stdout)
	assert.False(t, strings.Contains(string(e.Client.Do(http.MethodGet, "/elections/fr.sched", nil, "").Body), `"led":true`))

	// A multi-lock's member names its group.
	g := testkit.LockAll(e.Client, "grouped", []string{"fr.m1", "fr.m2"}, 60000, 0, "")
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	r = e.cli(t, "force-release", "--lock", "fr.m2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^force-released lock "fr.m2": removed the exclusive hold of "grouped", fence [0-9]+, of multi-lock `+g.Str("id")+`\n$`, r.stdout)

	for _, args := range [][]string{{"--lock", "fr.none"}, {"--semaphore", "fr.none"}, {"--election", "fr.none"}} {
		r = e.cli(t, append([]string{"force-release"}, args...)...)
		assert.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		assert.Regexp(t, `^(lock|semaphore) "fr.none" was not held: nothing removed\n$|^election "fr.none" was not led: nothing removed\n$`, r.stdout, "%v", args)
	}
	for _, args := range [][]string{{}, {"--lock", "fr.x", "--election", "fr.x"}} {
		r = e.cli(t, append([]string{"force-release"}, args...)...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "usage: leasegate force-release ", "%v", args)
	}
	r = e.cli(t, "force-release", "--lock", "fr x")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stderr, "400 Invalid lock name")
}

// testCLIWatch: watch prints a lock's events one a line, starting with its state; a dropped stream
// is reopened, starting with a fresh state; --json prints each event's data with "event"; SIGTERM
// ends it with 0, a refused stream with 3.
func testCLIWatch(t *testing.T, e *env) {
	proxy := testkit.NewStreamProxy(t, e.Gateway.URL) // to drop the stream
	w := e.startLive(t, "watch", "--lock", "w.x", "--server", proxy.Server.URL)
	w.await(t, 1, at+`state free; 0 waiting$`)
	a := e.Hold(t, e.Client, "w.x", "a", 60000)
	w.await(t, 2, fmt.Sprintf(at+`granted "a" exclusive, fence %d; 0 waiting$`, a.Int("fence")))

	proxy.Server.CloseClientConnections()
	w.await(t, 3, fmt.Sprintf(at+`state held by "a" exclusive, fence %d, `+dur+` left; 0 waiting$`, a.Int("fence")))
	assert.Equal(t, int64(2), proxy.Opened.Load(), "reopened once")
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/w.x", testkit.TokenHeader(a.Str("token")), "").Status)
	w.await(t, 4, fmt.Sprintf(at+`released "a" exclusive, fence %d$`, a.Int("fence")))
	r := w.stop(t)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "leasegate: the events stream of lock \"w.x\" ended; reopening it\n", r.stderr)

	p := e.Client.Do(http.MethodPost, "/semaphores/w.pool", nil, testkit.PermitBody("p1", 2, 60000, 0))
	require.Equal(t, http.StatusCreated, p.Status, string(p.Body))
	j := e.startLive(t, "watch", "--semaphore", "w.pool", "--json")
	var state struct {
		Event string
		Used  int64
		Lock  string
	}
	require.NoError(t, json.Unmarshal([]byte(j.await(t, 1, `^\{`)), &state))
	assert.Equal(t, "state", state.Event)
	assert.Equal(t, int64(1), state.Used)
	assert.Equal(t, "w.pool", state.Lock)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/semaphores/w.pool?force=true", nil, "").Status)
	var forced struct {
		Event        string
		HoldsRemoved int64 `json:"holds_removed"`
	}
	require.NoError(t, json.Unmarshal([]byte(j.await(t, 2, `^\{`)), &forced))
	assert.Equal(t, "forced", forced.Event)
	assert.Equal(t, int64(1), forced.HoldsRemoved)
	r = j.stop(t)
	assert.Equal(t, 0, r.code, r.stderr)

	r = e.cli(t, "watch", "--lock", "w x")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stderr, "400 Invalid lock name")
	for _, args := range [][]string{{}, {"--lock", "w.a", "--lock", "w.b"}} {
		r = e.cli(t, append([]string{"watch"}, args...)...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "usage: leasegate watch ", "%v", args)
	}
}

// testCLIObserve: observe prints an election's events one a line with their ids, starting with
// its state; a dropped stream is resumed after the last event (Last-Event-ID), so nothing is
// printed twice or missed; --after ID starts after an event printed earlier; SIGTERM exits 0.
func testCLIObserve(t *testing.T, e *env) {
	proxy := testkit.NewStreamProxy(t, e.Gateway.URL) // to drop the stream
	s1 := e.Client.Do(http.MethodPost, "/elections/ob.e", nil, `{"owner":"s1","value":"v1","ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, s1.Status, string(s1.Body))
	lead := testkit.TokenHeader(s1.Str("token"))
	o := e.startLive(t, "observe", "ob.e", "--server", proxy.Server.URL)
	id := ` \(id (\d+-\d+)\)$`
	o.await(t, 1, fmt.Sprintf(at+`state led by "s1" value "v1", fence %d; 0 candidates`+id, s1.Int("fence")))
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodPut, "/elections/ob.e", lead, `{"value":"v2"}`).Status)
	proclaimed := o.await(t, 2, fmt.Sprintf(at+`proclaimed "s1" value "v2", fence %d`+id, s1.Int("fence")))

	proxy.Server.CloseClientConnections()
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/elections/ob.e", lead, "").Status)
	s2 := e.Client.Do(http.MethodPost, "/elections/ob.e", nil, `{"owner":"s2","value":"w","ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, s2.Status, string(s2.Body))
	o.await(t, 3, fmt.Sprintf(at+`resigned "s1", fence %d`+id, s1.Int("fence")))
	o.await(t, 4, fmt.Sprintf(at+`elected "s2" value "w", fence %d`+id, s2.Int("fence")))
	testkit.EventuallyPaced(t, 10*time.Second, "the stream reopened", func() bool { return proxy.Opened.Load() >= 2 })
	r := o.stop(t)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Len(t, strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"), 4, "nothing twice, no second state:\n%s", r.stdout)

	after := regexp.MustCompile(id).FindStringSubmatch(proclaimed)[1]
	j := e.startLive(t, "observe", "--after", after, "--json", "ob.e")
	var ev struct {
		ID, Event, Owner string
		Fence            int64
		Value            *string
	}
	require.NoError(t, json.Unmarshal([]byte(j.await(t, 1, `^\{`)), &ev))
	assert.Equal(t, "resigned", ev.Event)
	assert.Equal(t, "s1", ev.Owner)
	assert.Nil(t, ev.Value)
	require.NoError(t, json.Unmarshal([]byte(j.await(t, 2, `^\{`)), &ev))
	assert.Equal(t, "elected", ev.Event)
	assert.Equal(t, s2.Int("fence"), ev.Fence)
	require.NotNil(t, ev.Value)
	assert.Equal(t, "w", *ev.Value)
	r = j.stop(t)
	assert.Equal(t, 0, r.code, r.stderr)

	r = e.cli(t, "observe", "ob x")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stderr, "400 Invalid election name")
	for _, args := range [][]string{{}, {"ob.a", "--after", "12"}} {
		r = e.cli(t, append([]string{"observe"}, args...)...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "usage: leasegate observe ", "%v", args)
	}
}
