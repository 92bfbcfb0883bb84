package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// What run, elect and acquire --wait say about a wait: while it lasts, on a terminal only, one
// progress line on stderr rewritten every second (how long it has waited, who holds what it waits
// for, how many are in line); once it has run out, how long it waited and who still holds it.
// Both read the name's state (GET /locks/{name}, /semaphores/{name} or /elections/{name}; each
// member of a multi-lock): the wait itself is one long-poll after another, which says nothing
// until it ends. The gateway tells how many wait, not where in the line a waiter stands.

// progressEvery is how often the progress line is rewritten (and the state read).
const progressEvery = time.Second

// terminalFd returns w's file descriptor when w is a terminal. It asks as run does for stdin
// (TCGETS succeeds on a terminal only), with golang.org/x/sys, a dependency already;
// golang.org/x/term's IsTerminal makes the same call.
func terminalFd(w io.Writer) (fd int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return 0, false
	}
	fd = int(f.Fd())
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return fd, err == nil
}

// showProgress starts the progress line of a wait for t by owner, when stderr is a terminal, and
// returns what stops it: it clears the line and returns once the line's goroutine has ended, so
// that what stderr says next starts on a clean line.
func (c *command) showProgress(ctx context.Context, t target, owner string) (stop func()) {
	fd, ok := terminalFd(c.stderr)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		shown := false
		for {
			select {
			case <-ctx.Done():
				if shown {
					fmt.Fprint(c.stderr, "\r\033[K")
				}
				return
			case <-tick.C:
			}
			line := fmt.Sprintf("leasegate: waiting %s for %s", short(time.Since(start)), t)
			rctx, cancel := context.WithTimeout(ctx, progressEvery) // a late state would be out of date
			if state := c.waitedFor(rctx, t, owner); state != "" {
				line += ": " + state
			}
			cancel()
			if ctx.Err() != nil {
				continue // the wait ended during the read: say nothing of it
			}
			if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && ws.Col > 1 {
				if r := []rune(line); len(r) >= int(ws.Col) {
					line = string(r[:ws.Col-2]) + "…" // a wrapped line would not be rewritten in place
				}
			}
			fmt.Fprint(c.stderr, "\r\033[K"+line)
			shown = true
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// notGranted says that t was not granted after a wait of waited (0: a single try), and who holds
// it now: `gave up on lock "a" after waiting 2.0s: held by "o" (fence 17, 58s left)`, or
// `lock "a" not granted: held by …`. err is the gateway's last answer, whose retry-after stands
// in when the state cannot be read. It returns ExitNotAcquired.
func (c *command) notGranted(ctx context.Context, t target, owner string, waited time.Duration, err error) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	state := c.waitedFor(ctx, t, owner)
	var p *leasegate.ProblemError
	if state == "" && errors.As(err, &p) && p.RetryAfter() > 0 {
		state = fmt.Sprintf("the gateway said to retry after %s", short(p.RetryAfter()))
	}
	msg := fmt.Sprintf("%s not granted", t)
	if waited > 0 {
		msg = fmt.Sprintf("gave up on %s after waiting %s", t, short(waited))
	}
	if state != "" {
		msg += ": " + state
	}
	fmt.Fprintln(c.stderr, "leasegate:", msg)
	return ExitNotAcquired
}

// waited is how long a wait of up to wait that started at start has lasted; 0 for no wait.
func waited(wait time.Duration, start time.Time) time.Duration {
	if wait <= 0 {
		return 0
	}
	return time.Since(start)
}

// waitedFor reads t's state and says who holds it and how many wait; "" when it cannot be read.
// owner's own holds (a multi-lock's members taken so far) are counted apart.
func (c *command) waitedFor(ctx context.Context, t target, owner string) string {
	if t.locks != nil {
		return c.membersWaitedFor(ctx, t, owner)
	}
	a, err := t.inspect(ctx, c.gateways[0], "")
	if err != nil || a.err() != nil {
		return ""
	}
	switch {
	case t.election != "":
		var st leasegate.ElectionState
		if json.Unmarshal(a.body, &st) != nil {
			return ""
		}
		led := "vacant"
		if l := st.Leader; st.Led && l != nil {
			led = fmt.Sprintf("led by %q (value %q, fence %d, %s left)", l.Owner, l.Value, l.Fence, short(time.Duration(l.TtlMs)*time.Millisecond))
		}
		return led + inLine(st.Candidates)
	case t.semaphore != "":
		var st leasegate.SemaphoreState
		if json.Unmarshal(a.body, &st) != nil {
			return ""
		}
		return fmt.Sprintf("%d of %d permits taken%s", st.Used, st.Permits, owners(st.Holders, st.HolderCount)) + inLine(st.Waiters)
	}
	var st leasegate.LockState
	if json.Unmarshal(a.body, &st) != nil {
		return ""
	}
	return lockHeld(st) + inLine(st.Waiters)
}

// membersWaitedFor says how many of a multi-lock's members owner holds (a waiting multi-lock
// takes them one by one, in name order) and who holds the first one it does not.
func (c *command) membersWaitedFor(ctx context.Context, t target, owner string) string {
	mine := 0
	var other string
	for _, name := range t.locks {
		a, err := target{lock: name}.inspect(ctx, c.gateways[0], "")
		if err != nil || a.err() != nil {
			return ""
		}
		var st leasegate.LockState
		if json.Unmarshal(a.body, &st) != nil {
			return ""
		}
		if st.Owner != nil && *st.Owner == owner && st.Multilock != nil {
			mine++
			continue
		}
		if other == "" && (st.Held || st.Waiters > 0) {
			other = fmt.Sprintf("%q %s%s", name, lockHeld(st), inLine(st.Waiters))
		}
	}
	words := fmt.Sprintf("has %d of %d", mine, len(t.locks))
	if other != "" {
		words += "; " + other
	}
	return words
}

// lockHeld says who holds a lock: `held by "o" (fence 17, 27s left)`, `held shared by 2 ("a",
// "b")`, or free.
func lockHeld(st leasegate.LockState) string {
	switch {
	case st.Owner != nil && st.Fence != nil && st.TtlMs != nil:
		return fmt.Sprintf("held by %q (fence %d, %s left)", *st.Owner, *st.Fence, short(time.Duration(*st.TtlMs)*time.Millisecond))
	case st.Holders != nil && len(*st.Holders) > 0:
		count := int64(len(*st.Holders))
		if st.HolderCount != nil {
			count = *st.HolderCount
		}
		return fmt.Sprintf("held shared by %d%s", count, owners(*st.Holders, count))
	case st.Held:
		return "held by Redisson's clients"
	}
	return "free"
}

// owners is ` ("a", "b", 3 more)`, naming the first holders, or "" for none.
func owners(holders []leasegate.Holder, count int64) string {
	if len(holders) == 0 {
		return ""
	}
	names := make([]string, 0, shownHolders+1)
	for i, h := range holders {
		if i == shownHolders {
			break
		}
		names = append(names, fmt.Sprintf("%q", h.Owner))
	}
	if more := count - int64(len(names)); more > 0 {
		names = append(names, fmt.Sprintf("%d more", more))
	}
	return " (" + strings.Join(names, ", ") + ")"
}

// inLine is `; 2 in line`, or "" when nobody waits.
func inLine(waiting int64) string {
	if waiting == 0 {
		return ""
	}
	return fmt.Sprintf("; %d in line", waiting)
}
