package firstcontact

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/testkit"
)

// A transcript is a console block of the documentation marked <!-- test: transcript -->: a
// session as a reader types it, each command after "$ " followed by what it printed, with
// comments ("# ...") between them. TestDocsTranscripts replays each in one bash against a real
// gateway and checks that every command printed what the block shows, in shape: see
// shapeChecker for what may differ from one run to the next.
//
// The block's rules, which keep it replayable in one terminal: every output follows its command
// (a comment ends it); a command that waits in the background writes its answer to a file
// (`curl ... > migrator.json &`), which a later `cat migrator.json` shows; localhost:8080 is the
// gateway (the replay gives its own address).

// transcriptStep is one command of a transcript and the output shown after it.
type transcriptStep struct {
	Line  int // of the command in its file, 1-based
	Cmd   string
	Shown []string // without trailing blank lines; empty when it printed nothing
}

// parseTranscript returns the steps of the transcript b of the file rel.
func parseTranscript(rel string, b block) ([]transcriptStep, error) {
	var steps []transcriptStep
	open := false // whether the last step's output may go on
	for i, line := range strings.Split(strings.TrimRight(b.Code, "\n"), "\n") {
		n := b.Line + 1 + i
		switch {
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, transcriptStep{Line: n, Cmd: strings.TrimPrefix(line, "$ ")})
			open = true
		case line == "#" || strings.HasPrefix(line, "# "):
			open = false
		case line == "":
			if open {
				steps[len(steps)-1].Shown = append(steps[len(steps)-1].Shown, "")
			}
		default:
			if !open {
				return nil, fmt.Errorf("%s:%d: output with no command before it: show a background command's output with `cat FILE`", rel, n)
			}
			steps[len(steps)-1].Shown = append(steps[len(steps)-1].Shown, line)
		}
	}
	for i := range steps {
		s := steps[i].Shown
		for len(s) > 0 && s[len(s)-1] == "" {
			s = s[:len(s)-1]
		}
		steps[i].Shown = s
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%s:%d: a transcript without a command", rel, b.Line)
	}
	return steps, nil
}

// background matches a command that runs in the background, writing to a file.
var background = regexp.MustCompile(`>\s*([A-Za-z0-9._-]+)\s*&\s*(#.*)?$`)

// transcriptShell is one bash reading commands on its standard input, as a reader's terminal:
// what one command sets, the next sees. Its background jobs are killed when t ends.
type transcriptShell struct {
	t     *testing.T
	dir   string
	stdin io.WriteCloser
	out   *testkit.LockedBuffer // bash's standard output and error
	taken int                   // how much of out earlier commands printed
	jobs  []string              // the files background commands write, in dir
}

func newTranscriptShell(t *testing.T, env []string) *transcriptShell {
	t.Helper()
	s := &transcriptShell{t: t, dir: t.TempDir(), out: &testkit.LockedBuffer{}}
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = s.dir, env
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatalf("start bash: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return s
}

// doneMark ends each command's output: the status it exited with.
var doneMark = regexp.MustCompile(`\x1e(\d+)\x1e\n`)

// run runs one command line and returns what it printed and its exit status, failing t if it
// does not finish within timeout.
func (s *transcriptShell) run(line string, timeout time.Duration) (string, int) {
	s.t.Helper()
	if _, err := fmt.Fprintf(s.stdin, "%s\nprintf '\\036%%s\\036\\n' \"$?\"\n", line); err != nil {
		s.t.Fatalf("bash: %v", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		text := s.out.String()[s.taken:]
		if m := doneMark.FindStringSubmatchIndex(text); m != nil {
			s.taken += m[1]
			status, _ := strconv.Atoi(text[m[2]:m[3]])
			return text[:m[0]], status
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: no end after %v; printed so far:\n%s", line, timeout, text)
		}
		<-time.After(5 * time.Millisecond)
	}
}

// file returns what the background job writing name wrote so far.
func (s *transcriptShell) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name))
	return string(b)
}

// replayTranscript replays the steps in a new shell, with localhost:8080 standing for the gateway
// at hostPort, and checks each command's output against the one shown; waiting(), the number of
// requests waiting on the gateway, tells when a background command is in line. It returns what
// each step printed; without compare it checks only that each command exits 0.
func replayTranscript(t *testing.T, steps []transcriptStep, env []string, hostPort string, waiting func() int64, compare bool) []string {
	t.Helper()
	sh := newTranscriptShell(t, env)
	check := &shapeChecker{}
	outputs := make([]string, len(steps))
	for i, st := range steps {
		line := strings.ReplaceAll(st.Cmd, "localhost:8080", hostPort)
		where := fmt.Sprintf("line %d: $ %s", st.Line, st.Cmd)
		// A command that reads a background command's file waits for what the block shows of it.
		for _, f := range sh.jobs {
			if !strings.Contains(line, f) || background.MatchString(line) {
				continue
			}
			lines := 1
			if strings.HasPrefix(line, "cat ") {
				lines = max(1, len(st.Shown))
			}
			testkit.EventuallyPaced(t, 10*time.Second, where+": "+f+" written", func() bool {
				text := sh.file(f)
				return strings.HasSuffix(text, "\n") && strings.Count(text, "\n") >= lines
			})
		}
		var before int64
		bg := background.FindStringSubmatch(line)
		if bg != nil {
			before = waiting()
		} else if strings.HasSuffix(strings.TrimSpace(line), "&") {
			t.Fatalf("%s: a background command must write to a file (> FILE &), shown later with cat", where)
		}
		out, status := sh.run(line, 30*time.Second)
		if status != 0 {
			t.Fatalf("%s: exit status %d; it printed:\n%s", where, status, out)
		}
		if bg != nil {
			sh.jobs = append(sh.jobs, bg[1])
			// In line (or answered, or streaming) before the next command, as a reader would see it.
			testkit.EventuallyPaced(t, 10*time.Second, where+": in line or answered", func() bool {
				return sh.file(bg[1]) != "" || waiting() > before
			})
		}
		outputs[i] = out
		if !compare {
			continue
		}
		for _, p := range check.output(st.Shown, out) {
			t.Errorf("%s: %s", where, p)
		}
		if t.Failed() {
			t.Fatalf("%s: shown:\n%s\nprinted:\n%s", where, strings.Join(st.Shown, "\n"), out)
		}
	}
	return outputs
}

// shownOutput is out as a transcript shows it: tokens shortened to "…", headers that only add
// noise (Date, Content-Length) left out, no carriage returns or trailing blank lines.
func shownOutput(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(strings.ReplaceAll(out, "\r", ""), "\n"), "\n") {
		if strings.HasPrefix(l, "Date: ") || strings.HasPrefix(l, "Content-Length: ") {
			continue
		}
		lines = append(lines, longToken.ReplaceAllString(l, `"$1":"…"`))
	}
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

var longToken = regexp.MustCompile(`"(token|queue_ticket)":"[^"]+"`)

// rewriteTranscript returns text (a Markdown file) with the output shown after each step replaced
// by outputs (as shownOutput makes them); steps are in text's order.
func rewriteTranscript(text string, steps []transcriptStep, outputs []string) string {
	lines := strings.Split(text, "\n")
	for i := len(steps) - 1; i >= 0; i-- {
		at := steps[i].Line // the first line after the command (Line is 1-based)
		lines = append(lines[:at], append(shownOutput(outputs[i]), lines[at+len(steps[i].Shown):]...)...)
	}
	return strings.Join(lines, "\n")
}
