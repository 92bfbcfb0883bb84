package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The guardian keeps run's promise that the command never outlives the lease when run itself is
// killed (SIGKILL, or a crash) and so cannot stop the command: the lease then lapses with its TTL
// and the next holder starts, while the command would go on.
//
// run (and elect) starts a guardian first thing, and waits until it is up before it asks for
// the lease (so that the wait costs no renewal time): this binary again, as "leasegate run
// __guard", in a session of its own, reading a pipe that only run holds open. run tells it of
// each command it starts and of its exit. When the pipe ends (run has exited, or died) while a
// command is running, the guardian SIGKILLs, at once,
//
//   - the command's process group, which holds everything the command started unless it moved
//     to another group or session (background jobs, and orphans of a double fork, stay in it);
//   - then every process whose environment (as it was when the process was exec'd, read from
//     /proc/PID/environ) holds the command's LEASEGATE_TOKEN line, round after round until a
//     round finds no new one. This also reaches what left the group (setsid, setpgid, a daemon's
//     double fork), since children inherit their parent's environment.
//
// Not covered: a process that left the command's process group and was also exec'd without the
// token in its environment (env -i, or a sanitising launcher such as sudo), one running as
// another user, and work handed to a process outside the command's tree (systemd-run, at, a
// container runtime). A cgroup of the command's own would cover these, but needs a delegated
// cgroup, which run cannot count on.
//
// The guardian is a sibling of the command, not its parent, so the command's parent, exit status
// and signals are run's, as before. (A guardian between run and the command could be a child
// subreaper (PR_SET_CHILD_SUBREAPER) and kill exactly its descendants, at the cost of relaying
// the command's exit status and signals; the environment covers nearly as much from the side.
// PR_SET_PDEATHSIG on the command would reach the command alone, not what it started, and Go
// ties it to the thread that forked, which may exit before run does.) The guardian lives as long
// as run: it exits when the pipe ends, whether or not it kills. Its own session keeps the signals
// meant for the command, or for run's terminal, from reaching it, and so does the group kill of
// an outer guardian when leasegate runs leasegate.

// guardArg, after "run", makes leasegate a guardian (see Run).
const guardArg = "__guard"

// The guardian's input, one line each, from run through a pipe. For each command, in this order:
//
//	mark NAME=VALUE   a command is starting whose environment holds this line
//	group PID         it started as process PID, leading process group PID
//	process PID       it started as process PID, in run's own process group
//	done              it has exited (or did not start): nothing of it to kill
//
// The pipe ending between a "mark" and its "done" means that run died with the command running.
// The guardian writes one line to its output, "ready", once it reads its input.
const (
	guardMark    = "mark"
	guardGroup   = "group"
	guardProcess = "process"
	guardDone    = "done"
	guardReady   = "ready"
)

// guardian is run's end of a guardian process. Its methods are for one goroutine at a time.
type guardian struct {
	pipe *os.File // the pipe's write end, held by run alone
}

// startGuardian starts a guardian, which reports on stderr what it had to kill, and returns once
// it is up.
func startGuardian(stderr io.Writer) (*guardian, error) {
	// Both close-on-exec: no command inherits them.
	in, tell, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer in.Close() // the guardian has its own copy
	hear, out, err := os.Pipe()
	if err != nil {
		tell.Close()
		return nil, err
	}
	defer hear.Close()
	// /proc/self/exe is this binary even if its file was replaced since it started.
	proc := &exec.Cmd{Path: "/proc/self/exe", Args: []string{"leasegate", "run", guardArg}, Stdin: in, Stdout: out, Stderr: stderr}
	// Without LEASEGATE_TOKEN, which an outer run may have given this one: an outer guardian must
	// leave this one alive to do its work.
	proc.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, tokenVar+"=") })
	proc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = proc.Start()
	out.Close() // the guardian's copy alone, so that its exit ends the read below
	if err != nil {
		tell.Close()
		return nil, fmt.Errorf("starting the guardian of the command: %w", err)
	}
	if line, _ := bufio.NewReader(hear).ReadString('\n'); line != guardReady+"\n" {
		tell.Close()
		return nil, fmt.Errorf("the guardian of the command exited as it started (%v)", proc.Wait())
	}
	// Nobody waits for it: it exits when this process has, and init reaps it.
	_ = proc.Process.Release()
	return &guardian{pipe: tell}, nil
}

// starting tells the guardian that a command whose environment holds mark is about to start.
func (g *guardian) starting(mark string) { g.tell(guardMark + " " + mark) }

// started tells the guardian which process cmd runs as.
func (g *guardian) started(cmd *exec.Cmd) {
	what := guardProcess
	if ownGroup(cmd) {
		what = guardGroup
	}
	g.tell(what + " " + strconv.Itoa(cmd.Process.Pid))
}

// exited tells the guardian that the command has exited, or did not start.
func (g *guardian) exited() { g.tell(guardDone) }

// close ends the pipe, and so the guardian, which kills the command if one is running.
func (g *guardian) close() { g.pipe.Close() }

// tell writes one line to the guardian. An error means that the guardian is gone (killed by
// someone): the command then runs unguarded, which is no reason to stop it.
func (g *guardian) tell(line string) { _, _ = fmt.Fprintln(g.pipe, line) }

// guard is the guardian's side: it says it is ready on out, reads in until its end, then kills
// the command that was running, if any, as the comment at the top of this file says. It returns
// the exit code: 0, since run, whose failure it would be, is gone.
func guard(in io.Reader, out, stderr io.Writer) int {
	// Meant for the command, for run, or for everything at shutdown: the guardian ends with run.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	fmt.Fprintln(out, guardReady)
	var (
		running bool // between a "mark" and its "done"
		mark    string
		pid     int
		group   bool
	)
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		word, arg, _ := strings.Cut(lines.Text(), " ")
		switch word {
		case guardMark:
			running, mark, pid, group = true, arg, 0, false
		case guardGroup, guardProcess:
			pid, _ = strconv.Atoi(arg)
			group = word == guardGroup
		case guardDone:
			running = false
		}
	}
	if !running {
		return 0
	}
	switch {
	case pid > 0 && group:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	case pid > 0:
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	marked := killMarked(mark)
	fmt.Fprintf(stderr, "leasegate: leasegate died while its command (pid %d) ran; killed the command's process group and %d processes holding its %s\n",
		pid, marked, tokenVar)
	return 0
}

// killMarked SIGKILLs every process (but this one) whose environment holds mark, round after
// round until one finds no process it had not signalled already (a process may fork between
// being read and being killed), and returns how many it signalled.
func killMarked(mark string) int {
	if mark == "" {
		return 0
	}
	// Entries end with a NUL: match whole entries only, the first or one after another's end.
	first, later := []byte(mark+"\x00"), []byte("\x00"+mark+"\x00")
	self := os.Getpid()
	signalled := map[int]bool{}
	for {
		found := false
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			pid, err := strconv.Atoi(p.Name())
			if err != nil || pid == self || signalled[pid] {
				continue
			}
			env, err := os.ReadFile("/proc/" + p.Name() + "/environ") // fails for another user's processes
			if err != nil || !bytes.HasPrefix(env, first) && !bytes.Contains(env, later) {
				continue
			}
			// The PID is not another process's yet: the kernel hands PIDs out in turn, reusing one
			// only after its counter has wrapped around pid_max (32768 or more).
			_ = syscall.Kill(pid, syscall.SIGKILL)
			signalled[pid], found = true, true
		}
		if !found {
			return len(signalled)
		}
	}
}
