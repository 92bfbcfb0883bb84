//go:build ignore

// Testprogress reads `go test -json` on standard input and writes two things:
//
//   - on standard output, what `go test` without -json prints for packages named on its command
//     line: a passing package's "ok" (or "?") line; a failing package's "--- FAIL" lines with the
//     failed tests' full output, then its "FAIL" line, as one block when the package ends; and a
//     closing "FAIL" line when any package failed. Lines that are not JSON pass through as they
//     are, and build errors go to standard error, as `go test` prints them.
//   - on standard error, for the person waiting, lines starting with "[test]": a package's start,
//     its end with its duration, a test's failure as it happens, every -every which packages are
//     still running and for how long, and a closing count.
//
// It exits 1 when a package failed. scripts/test builds it and runs it on two go test runs'
// pipes (see there):
//
//	testprogress -packages N in-process.pipe black-box.pipe
//
// or, on one run, as
//
//	go test -json ... | testprogress -packages N
//
// It is a standalone program (go build takes a file named on its command line although its build
// tag keeps it out of ./...) of the standard library only, so that the module gains no dependency.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, and go test's build events).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output events
}

// chunk is a piece of a package's output: the test it belongs to ("" for the package's own), and
// its place in the package's output.
type chunk struct {
	test string
	seq  int
	text string
}

// pkg is one package's run as far as the events told it.
type pkg struct {
	name    string // import path without the module's prefix
	started time.Time
	out     map[string][]chunk // by test; a passed or skipped test's is dropped, unless verbose
	seq     int
	result  map[string]string // test -> "pass", "fail" or "skip"; absent while it runs
	midLine map[string]bool   // the test's last output did not end its line
	failed  []string          // tests reported failed on standard error, in order
	ended   int               // top-level tests ended
}

type reporter struct {
	stdout, stderr io.Writer
	trim           string // the module path and a slash, cut from package names
	total          int    // packages expected (0: unknown)
	verbose        bool   // print every package's whole output, as go test -v does
	begin          time.Time
	running        map[string]*pkg
	done, failed   int
	failedNames    []string
	why            []string // the failed tests' own messages, said again at the end
}

func main() {
	every := flag.Duration("every", 30*time.Second, "how often to say which packages are still running")
	total := flag.Int("packages", 0, "how many packages the run tests, for the counts (0: unknown)")
	verbose := flag.Bool("v", false, "print every package's whole output when it ends (go test -v)")
	flag.Parse()

	r := &reporter{stdout: os.Stdout, stderr: os.Stderr, total: *total, verbose: *verbose, begin: time.Now(), running: map[string]*pkg{}}
	if m := modulePath("go.mod"); m != "" {
		r.trim = m + "/"
	}
	r.note("go test is compiling the test binaries (with -race after a change, that takes minutes), then runs them; a line follows as each package starts and ends, and every %s what is still running", *every)

	// The events come on standard input, or from each file named (several go test runs at once,
	// each writing to a pipe of its own: their lines must not mix). Each ends when its writer
	// exits.
	inputs := []io.Reader{os.Stdin}
	if flag.NArg() > 0 {
		inputs = nil
		for _, name := range flag.Args() {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "testprogress:", err)
				os.Exit(2)
			}
			defer f.Close()
			inputs = append(inputs, f)
		}
	}
	lines := make(chan []byte)
	var readers sync.WaitGroup
	for _, input := range inputs {
		readers.Go(func() {
			in := bufio.NewReaderSize(input, 1<<16)
			for {
				line, err := in.ReadBytes('\n')
				if len(line) > 0 {
					lines <- line
				}
				if err != nil {
					return
				}
			}
		})
	}
	go func() { readers.Wait(); close(lines) }()
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				r.finish()
				if r.failed > 0 {
					os.Exit(1)
				}
				return
			}
			r.line(line)
		case <-tick.C:
			r.stillRunning()
		}
	}
}

// modulePath reads the module path from the go.mod file at path ("" if it cannot).
func modulePath(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}

func (r *reporter) note(format string, args ...any) {
	fmt.Fprintf(r.stderr, "[test] "+format+"\n", args...)
}

func (r *reporter) line(line []byte) {
	var e event
	if !bytes.HasPrefix(line, []byte("{")) || json.Unmarshal(line, &e) != nil {
		r.stdout.Write(line) // not an event: pass it on
		return
	}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.stderr, e.Output)
	case e.Package == "":
	case e.Action == "start":
		p := &pkg{name: r.short(e.Package), started: time.Now(), out: map[string][]chunk{}, result: map[string]string{}, midLine: map[string]bool{}}
		r.running[e.Package] = p
		r.note("start   %s", p.name)
	default:
		p := r.running[e.Package]
		if p == nil {
			return
		}
		r.event(p, e)
	}
}

func (r *reporter) event(p *pkg, e event) {
	switch e.Action {
	case "output":
		p.seq++
		p.out[e.Test] = append(p.out[e.Test], chunk{e.Test, p.seq, e.Output})
	case "pass", "fail", "skip":
		if e.Test != "" {
			p.result[e.Test] = e.Action
			if e.Action != "fail" && !r.verbose {
				delete(p.out, e.Test) // go test without -v does not show it
			}
			if !strings.Contains(e.Test, "/") {
				p.ended++
			}
			if e.Action == "fail" && !hasFailedSubtest(p.failed, e.Test) {
				p.failed = append(p.failed, e.Test)
				r.note("test failed: %s %s (%s); its output follows when the package ends", p.name, e.Test, seconds(e.Elapsed))
			}
			return
		}
		delete(r.running, e.Package)
		r.done++
		r.packageEnded(p, e)
	}
}

// hasFailedSubtest reports whether one of failed is a subtest of test, which said it already.
func hasFailedSubtest(failed []string, test string) bool {
	for _, f := range failed {
		if strings.HasPrefix(f, test+"/") {
			return true
		}
	}
	return false
}

// packageEnded prints the package's result as go test prints it, and says so on standard error.
func (r *reporter) packageEnded(p *pkg, e event) {
	var out []chunk
	for _, cs := range p.out {
		out = append(out, cs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	for _, c := range out {
		if r.verbose || r.shown(p, c, e.Action == "fail") {
			fmt.Fprint(r.stdout, c.text)
		}
	}
	switch {
	case e.Action == "skip":
		r.note("no tests %s (%s)", p.name, r.progress())
		return
	case e.Action != "fail":
		r.note("passed  %s in %s (%s)", p.name, seconds(e.Elapsed), r.progress())
		return
	}
	r.failed++
	r.failedNames = append(r.failedNames, p.name)
	for _, test := range p.failed {
		r.why = append(r.why, fmt.Sprintf("%s %s:\n%s", p.name, test, messages(out, test)))
	}
	r.note("failed  %s after %s (%s)", p.name, seconds(e.Elapsed), r.progress())
}

// shown reports whether go test without -v shows c, a chunk of p's output in order. Of a passing
// package, only its "ok" (or "?") line. Of a failed one, its own output and the output of its
// failed tests and of those that never ended (a panic, a timeout), without the "=== RUN" framing
// that only verbose output has.
func (r *reporter) shown(p *pkg, c chunk, failed bool) bool {
	if !failed {
		return c.test == "" && (strings.HasPrefix(c.text, "ok ") || strings.HasPrefix(c.text, "? "))
	}
	framing := !p.midLine[c.test] && strings.HasPrefix(c.text, "=== ")
	p.midLine[c.test] = !strings.HasSuffix(c.text, "\n")
	res, ended := p.result[c.test]
	return !framing && (c.test == "" || res == "fail" || !ended)
}

// messages returns test's (or its subtests') lines of out, without the "log tail:" blocks that the
// test harness adds when a test failed (the indented lines after such a line), at most 40 lines.
func messages(out []chunk, test string) string {
	var b strings.Builder
	lines, inTail := 0, false
	for _, c := range out {
		if c.test != test && !strings.HasPrefix(c.test, test+"/") {
			continue
		}
		for _, l := range strings.SplitAfter(c.text, "\n") {
			trimmed := strings.TrimSpace(l)
			if trimmed == "" || strings.HasPrefix(trimmed, "=== ") {
				continue
			}
			indent := len(l) - len(strings.TrimLeft(l, " \t"))
			switch {
			case strings.HasSuffix(trimmed, "log tail:"):
				inTail = true
				continue
			case inTail && indent > 4:
				continue
			}
			inTail = false
			if lines++; lines > 40 {
				b.WriteString("    ...\n")
				return b.String()
			}
			b.WriteString("    " + strings.TrimRight(l, "\n") + "\n")
		}
	}
	return b.String()
}

// stillRunning says which packages run now, longest first, and for how long.
func (r *reporter) stillRunning() {
	if len(r.running) == 0 {
		r.note("%s: compiling, no package running (%s)", clock(time.Since(r.begin)), r.progress())
		return
	}
	ps := make([]*pkg, 0, len(r.running))
	for _, p := range r.running {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].started.Before(ps[j].started) })
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = fmt.Sprintf("%s (%s, %d tests ended)", p.name, clock(time.Since(p.started)), p.ended)
	}
	r.note("%s: still running %s (%s)", clock(time.Since(r.begin)), strings.Join(names, ", "), r.progress())
}

func (r *reporter) finish() {
	for path, p := range r.running { // go test ended without their end: it was killed or crashed
		delete(r.running, path)
		r.done++
		r.note("no result for %s; its output so far:", p.name)
		r.packageEnded(p, event{Action: "fail", Elapsed: time.Since(p.started).Seconds()})
	}
	if r.failed > 0 {
		fmt.Fprintln(r.stdout, "FAIL") // go test's closing line when a package failed
		// The failures' messages once more, last, where a reader of the run's tail finds them:
		// a failed test's output can end in many lines of servers' logs.
		r.note("why the failed tests failed (their output above, without the servers' log tails):")
		for _, w := range r.why {
			fmt.Fprint(r.stderr, w)
		}
		r.note("%d packages in %s, %d failed: %s", r.done, clock(time.Since(r.begin)), r.failed, strings.Join(r.failedNames, ", "))
		return
	}
	r.note("%d packages in %s, all passed", r.done, clock(time.Since(r.begin)))
}

func (r *reporter) progress() string {
	if r.total > 0 {
		return fmt.Sprintf("%d of %d packages done", r.done, max(r.total, r.done+len(r.running)))
	}
	return fmt.Sprintf("%d done", r.done)
}

// short names a package of the module as on go test's command line: ./tests/locks, "." for the root.
func (r *reporter) short(path string) string {
	if r.trim == "" {
		return path
	}
	if path+"/" == r.trim {
		return "."
	}
	if rel, ok := strings.CutPrefix(path, r.trim); ok {
		return "./" + rel
	}
	return path
}

// seconds renders a package's or test's elapsed seconds as go test does.
func seconds(s float64) string { return fmt.Sprintf("%.1fs", s) }

// clock renders a wall-clock duration to the second: 45s, 2m10s.
func clock(d time.Duration) string { return d.Round(time.Second).String() }
