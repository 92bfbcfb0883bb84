package commandline

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// killedWithin is how soon after run or elect is killed (SIGKILL) its command and everything the
// command started must be gone. The guardian, up before the command starts, reads the end of its
// pipe at once, kills the command's process group, then reads every process's environment: on
// this project's 2-core machine, loaded by other tests and two busy loops besides, that took
// 15-500 ms with race-built binaries (see the figures the test logs).
const killedWithin = time.Second

// guardianExitWithin is how soon after run or elect has gone the guardian has exited too. It is
// no part of what the lease needs, and a race-built binary takes long to exit on a loaded machine
// (over a second at times): this bound only says that the guardian does not linger.
const guardianExitWithin = 10 * time.Second

// TestCLIKilledLeavesNoCommandBehind kills run, then elect, outright (SIGKILL): neither can stop
// its command then, and the lease lapses with its TTL for the next holder to start, so the guardian
// each started must kill the command and what it started. The command is a shell that starts a
// background job, the orphan of a double fork (both still in its process group) and a process in a
// session of its own (setsid: out of the group, with the command's environment). All of them must
// be gone within killedWithin of the kill, and the guardian within guardianExitWithin.
func TestCLIKilledLeavesNoCommandBehind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"run", []string{"run", "--lock", "killed"}},
		{"elect", []string{"elect", "killed", "--value", "v"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			pidFile := filepath.Join(t.TempDir(), "pids")
			script := `sleep 300 & job=$!
(sleep 300 & echo $! > "$0.orphan")
setsid sleep 300 & detached=$!
echo "$$ $job $(cat "$0.orphan") $detached" > "$0.tmp" && mv "$0.tmp" "$0"
wait`
			cli, stderr := startKillable(t, e, append(c.args, "--", "sh", "-c", script, pidFile)...)
			var pids []int // the shell, the job, the orphan, the setsid process
			harness.Eventually(t, 10*time.Second, "the command and its children to start", func() bool {
				b, err := os.ReadFile(pidFile)
				if err != nil {
					return false
				}
				pids = nil
				for _, f := range strings.Fields(string(b)) {
					pid, err := strconv.Atoi(f)
					require.NoError(t, err, string(b))
					pids = append(pids, pid)
				}
				return true
			})
			require.Len(t, pids, 4)
			t.Cleanup(func() { // should the test fail: no sleep 300 left behind
				for _, pid := range pids {
					if alive(pid) {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			shell, detached := pids[0], pids[3]
			harness.Eventually(t, 10*time.Second, "the setsid process to lead a session of its own", func() bool {
				return stat(detached).session == detached
			})
			guardians := slices.DeleteFunc(childrenOf(cli.Process.Pid), func(pid int) bool { return pid == shell })
			assert.Len(t, guardians, 1, "%s's children but the command: its guardian", c.name)
			for _, pid := range pids {
				require.True(t, alive(pid), "pid %d runs before the kill", pid)
			}

			require.NoError(t, cli.Process.Kill())
			killed := time.Now()
			_ = cli.Wait() // its stderr is a file: Wait waits for nothing it started
			watched := append(slices.Clone(pids), guardians...)
			names := []string{"command", "background job", "double-fork orphan", "setsid process", "guardian"}
			gone := make([]time.Duration, len(watched)) // 0: still running
			for deadline := killed.Add(guardianExitWithin); slices.Contains(gone, 0) && time.Now().Before(deadline); <-time.After(5 * time.Millisecond) {
				for i, pid := range watched {
					if gone[i] == 0 && !alive(pid) {
						gone[i] = time.Since(killed)
					}
				}
			}
			var figures []string
			for i, took := range gone {
				if !assert.NotZero(t, took, "the %s (pid %d) still runs %v after the kill", names[i], watched[i], guardianExitWithin) {
					continue
				}
				if i < len(pids) {
					assert.Less(t, took, killedWithin, "the %s (pid %d) was gone %v after the kill", names[i], watched[i], took)
				}
				figures = append(figures, fmt.Sprintf("%s %v", names[i], took.Round(100*time.Microsecond)))
			}
			t.Logf("%s killed: gone after %s", c.name, strings.Join(figures, ", "))
			out := stderr()
			assert.Contains(t, out, "died while its command", "the guardian says what it did")
			t.Log(strings.TrimSpace(out))
		})
	}
}

// TestCLIGuardianEndsWithRun: run's guardian, and elect's (one for all its terms), exit when run
// or elect does, having killed nothing.
func TestCLIGuardianEndsWithRun(t *testing.T) {
	t.Parallel()
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		dir := t.TempDir()
		started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
		cli, stderr := startKillable(t, e, "run", "--lock", "guarded", "--", "sh", "-c",
			`touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done; exit 5`, started, stop)
		harness.Eventually(t, 10*time.Second, "the command to start", func() bool { _, err := os.Stat(started); return err == nil })
		children := childrenOf(cli.Process.Pid)
		require.Len(t, children, 2, "the command and the guardian")
		require.NoError(t, os.WriteFile(stop, nil, 0o644))
		_ = cli.Wait()
		assert.Equal(t, 5, cli.ProcessState.ExitCode(), stderr())
		awaitAllGone(t, children, "the command and the guardian")
		assert.NotContains(t, stderr(), "died", "the guardian killed nothing")
		assert.False(t, e.Held("guarded"))
	})
	t.Run("elect --again", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		log := filepath.Join(t.TempDir(), "log")
		cli, stderr := startKillable(t, e, "elect", "guarded", "--value", "v", "--again", "--",
			"sh", "-c", `echo "$$" >> "$0"; sleep 0.05`, log)
		terms := func() []string { b, _ := os.ReadFile(log); return strings.Fields(string(b)) }
		harness.Eventually(t, 20*time.Second, "3 terms", func() bool { return len(terms()) >= 3 })
		var guardians []int
		for _, pid := range childrenOf(cli.Process.Pid) {
			if !slices.Contains(terms(), strconv.Itoa(pid)) {
				guardians = append(guardians, pid)
			}
		}
		require.Len(t, guardians, 1, "one guardian for every term")
		require.NoError(t, cli.Process.Signal(syscall.SIGTERM))
		_ = cli.Wait()
		awaitAllGone(t, guardians, "the guardian")
		assert.NotContains(t, stderr(), "died", "the guardian killed nothing")
	})
}

// awaitAllGone waits up to guardianExitWithin for pids to be gone, and logs how long that took.
func awaitAllGone(t *testing.T, pids []int, what string) {
	t.Helper()
	start := time.Now()
	harness.Eventually(t, guardianExitWithin, what+" to be gone", func() bool {
		return !slices.ContainsFunc(pids, alive)
	})
	t.Logf("%s gone %v after leasegate exited", what, time.Since(start).Round(100*time.Microsecond))
}

// startKillable starts the leasegate binary with args against e's gateway, its stderr going to a
// file (a pipe would keep Wait waiting for every process that inherited it), and returns the
// process and a function reading what it wrote there so far.
func startKillable(t *testing.T, e *env, args ...string) (*exec.Cmd, func() string) {
	t.Helper()
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	require.NoError(t, err)
	t.Cleanup(func() { errFile.Close() })
	cmd := exec.Command(bin, args...)
	cmd.Env = e.cliEnv()
	cmd.Stderr = errFile
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, func() string {
		b, _ := os.ReadFile(errFile.Name())
		return string(b)
	}
}

// procStat is what the test reads of a process in /proc/PID/stat.
type procStat struct {
	state         byte // R, S, D, T, Z (a zombie: dead, not yet reaped)...; 0: no such process
	ppid, session int
}

// stat reads pid's /proc/PID/stat; its state is 0 when there is no such process.
func stat(pid int) procStat {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}
	}
	// pid (comm) state ppid pgrp session ...: comm may hold spaces, so read after its closing
	// parenthesis.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 4 {
		return procStat{}
	}
	var s procStat
	s.state = fields[0][0]
	s.ppid, _ = strconv.Atoi(fields[1])
	s.session, _ = strconv.Atoi(fields[3])
	return s
}

// alive reports whether pid runs: a zombie (dead, waiting for its parent, or for init once
// orphaned, to reap it) answers kill -0 but does not count.
func alive(pid int) bool {
	switch stat(pid).state {
	case 0, 'Z', 'X':
		return false
	}
	return true
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var children []int
	for _, entry := range entries {
		child, err := strconv.Atoi(entry.Name())
		if err == nil && stat(child).ppid == pid {
			children = append(children, child)
		}
	}
	return children
}
