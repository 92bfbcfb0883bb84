package commandline

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// testCLIWaitSaysHowLongItWaited: run, elect and acquire whose --wait runs out say how long they
// waited and who holds what they waited for (not the holder's TTL as a "retry after"), in one line:
// with stderr not a terminal, no progress line comes before it.
func testCLIWaitSaysHowLongItWaited(t *testing.T, e *env) {
	x := e.Hold(t, e.Client, "wt.x", "holder", 60000).Int("fence")
	led := e.Client.Do(http.MethodPost, "/elections/wt.e", nil, `{"owner":"leader","value":"l","ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, led.Status, string(led.Body))
	p := e.Client.Do(http.MethodPost, "/semaphores/wt.s", nil, testkit.PermitBody("p1", 1, 60000, 0))
	require.Equal(t, http.StatusCreated, p.Status, string(p.Body))

	heldX := fmt.Sprintf(`held by "holder" \(fence %d, %s left\)`, x, dur)
	cases := []struct {
		args []string
		says string // the whole of stderr
	}{
		{[]string{"run", "--lock", "wt.x", "--wait", "1500ms", "--", "true"},
			`gave up on lock "wt.x" after waiting ` + dur + `: ` + heldX},
		{[]string{"run", "--lock", "wt.x", "--", "true"},
			`lock "wt.x" not granted: ` + heldX},
		{[]string{"elect", "wt.e", "--value", "v", "--wait", "1s", "--", "true"},
			fmt.Sprintf(`gave up on election "wt.e" after waiting %s: led by "leader" \(value "l", fence %d, %s left\)`, dur, led.Int("fence"), dur)},
		{[]string{"run", "--semaphore", "wt.s", "--permits", "1", "--wait", "1s", "--", "true"},
			`gave up on semaphore "wt.s" after waiting ` + dur + `: 1 of 1 permits taken \("p1"\)`},
		{[]string{"run", "--lock", "wt.m", "--lock", "wt.x", "--wait", "1s", "--", "true"},
			`gave up on multi-lock \["wt.m" "wt.x"\] after waiting ` + dur + `: has 0 of 2; "wt.x" ` + heldX},
		{[]string{"acquire", "--lock", "wt.x", "--wait", "1s"},
			`gave up on lock "wt.x" after waiting ` + dur + `: ` + heldX},
	}
	runs := make([]<-chan cliRun, len(cases))
	for i, c := range cases {
		runs[i] = e.startCLI(t, c.args...)
	}
	for i, c := range cases {
		r := <-runs[i]
		assert.Equal(t, 75, r.code, "%v: %s", c.args, r.stderr)
		// The cases wait at once: the others may be in wt.x's line, and a waiter that gave up
		// may still count in its line for a moment.
		assert.Regexp(t, "^leasegate: "+c.says+`(; \d in line)?\n$`, r.stderr, "%v", c.args)
		if c.args[0] == "acquire" {
			assert.Contains(t, r.stdout, "urn:leasegate:problem:lock-held", "the problem on stdout, as before")
		}
	}
}

// testCLIWaitShowsProgressOnATerminal: with stderr a terminal, run --wait and elect --wait show one
// progress line, rewritten every second: how long they have waited, who holds the lock (leads the
// election), how many are in line. It is cleared once the wait ends.
func testCLIWaitShowsProgressOnATerminal(t *testing.T, e *env) {
	x := e.Hold(t, e.Client, "tty.x", "holder", 60000)
	led := e.Client.Do(http.MethodPost, "/elections/tty.e", nil, `{"owner":"leader","value":"l","ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, led.Status, string(led.Body))

	run := e.startOnTerminal(t, "run", "--lock", "tty.x", "--wait", "20s", "--", "true")
	elect := e.startOnTerminal(t, "elect", "tty.e", "--value", "v", "--wait", "20s", "--", "true")
	progress := func(what, state string) *regexp.Regexp {
		return regexp.MustCompile(`\r\x1b\[Kleasegate: waiting ` + dur + ` for ` + what + `: ` + state + `; 1 in line`)
	}
	runLine := progress(`lock "tty.x"`, fmt.Sprintf(`held by "holder" \(fence %d, %s left\)`, x.Int("fence"), dur))
	electLine := progress(`election "tty.e"`, fmt.Sprintf(`led by "leader" \(value "l", fence %d, %s left\)`, led.Int("fence"), dur))
	testkit.EventuallyPaced(t, 10*time.Second, "the progress lines", func() bool {
		return runLine.MatchString(run.out.String()) && electLine.MatchString(elect.out.String())
	})

	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/locks/tty.x", testkit.TokenHeader(x.Str("token")), "").Status)
	require.Equal(t, http.StatusOK, e.Client.Do(http.MethodDelete, "/elections/tty.e", testkit.TokenHeader(led.Str("token")), "").Status)
	for _, c := range []*terminalCLI{run, elect} {
		code := testkit.Receive(t, c.exited, 20*time.Second, "the command's exit")
		testkit.Receive(t, c.closed, 10*time.Second, "the terminal's end")
		out := c.out.String()
		assert.Equal(t, 0, code, "%q", out)
		assert.True(t, strings.HasSuffix(out, "\r\x1b[K"), "the line cleared at the end: %q", out)
		assert.NotContains(t, out, "\n", "nothing but the progress line: %q", out)
	}
}

// terminalCLI is a leasegate process whose stderr is a terminal (a pseudo-terminal the test reads).
type terminalCLI struct {
	out    syncBuffer    // what it wrote to the terminal
	exited chan int      // its exit code
	closed chan struct{} // closed when nothing holds the terminal open any more (its guardian too)
}

// startOnTerminal starts the leasegate binary with args against e's gateway, its stderr a
// pseudo-terminal; it is killed when t ends if still running.
func (e *env) startOnTerminal(t *testing.T, args ...string) *terminalCLI {
	t.Helper()
	master, terminal := openPTY(t)
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stderr = e.cliEnv(), terminal
	require.NoError(t, cmd.Start())
	terminal.Close() // the process's copy alone, so that its end (and its guardian's) ends the reads
	c := &terminalCLI{exited: make(chan int, 1), closed: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		c.exited <- cmd.ProcessState.ExitCode()
	}()
	go func() {
		defer close(c.closed)
		_, err := io.Copy(&c.out, master) // EIO once no process holds the terminal
		if err != nil && !errors.Is(err, unix.EIO) {
			t.Errorf("reading the terminal: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.closed
		master.Close()
	})
	return c
}

// openPTY opens a pseudo-terminal: its master side, which the test reads, and the terminal a
// process writes to (TIOCGPTPEER: no path under /dev/pts to look up).
func openPTY(t *testing.T) (master, terminal *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, master.Fd(), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		master.Close()
		require.NoError(t, errno, "TIOCGPTPEER")
	}
	return master, os.NewFile(fd, "pty")
}
