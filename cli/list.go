package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// list prints what is held and who waits, one line per name: the locks, semaphores and elections
// (or, with --kind, one of them) whose names start with --prefix, as the admin listings (GET
// /locks, /semaphores, /elections) give them, page after page. --json prints each name's listing
// entry as it is, plus "kind" and "name", one JSON object a line. Without --kind, a kind the
// gateway does not offer (501: RedLock) is left out, saying so on stderr.
func (c *command) list(ctx context.Context, args []string) int {
	f := c.flags("list", "[--prefix P] [--kind lock|semaphore|election] [--json] [--server URL]")
	prefix := f.fs.String("prefix", "", "only the names that start with this")
	kind := f.fs.String("kind", "", "only this kind: lock, semaphore or election (default: all three)")
	asJSON := f.fs.Bool("json", false, `one JSON object a line for scripts: the gateway's listing entry, with "kind" and "name"`)
	if _, code, ok := c.parse(f, args); !ok {
		return code
	}
	kinds := listings
	switch {
	case f.fs.NArg() > 0:
		return c.usageError(f, fmt.Sprintf("list takes no arguments, got %q (--prefix P lists the names that start with P)", f.fs.Arg(0)))
	case *kind != "":
		kinds = nil
		for _, l := range listings {
			if l.kind == *kind {
				kinds = []listing{l}
			}
		}
		if kinds == nil {
			return c.usageError(f, fmt.Sprintf("--kind must be lock, semaphore or election, got %q", *kind))
		}
	}
	var out listWriter = &listTable{tw: tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)}
	if *asJSON {
		out = listJSON{w: c.stdout}
	}
	listed := 0
	for _, l := range kinds {
		err := c.listAll(ctx, l, *prefix, out)
		var p *leasegate.ProblemError
		if errors.As(err, &p) && p.Status == http.StatusNotImplemented && *kind == "" {
			fmt.Fprintf(c.stderr, "leasegate: this gateway lists no %ss: %v\n", l.kind, err)
			continue
		}
		if err != nil {
			_ = out.flush()
			return c.fail(err)
		}
		listed++
	}
	if err := out.flush(); err != nil {
		return c.fail(err)
	}
	if listed == 0 {
		fmt.Fprintln(c.stderr, "leasegate: this gateway offers no listing")
		return ExitFailed
	}
	if t, ok := out.(*listTable); ok && t.lines == 0 {
		fmt.Fprintf(c.stderr, "leasegate: nothing is held or waited for%s\n", underPrefix(*prefix))
	}
	return 0
}

// underPrefix is ` under prefix "p"`, or "" for no prefix.
func underPrefix(prefix string) string {
	if prefix == "" {
		return ""
	}
	return fmt.Sprintf(" under prefix %q", prefix)
}

// listing is one admin listing: its kind, the page's field that holds the entries, the entry's
// field that names it, how to ask for a page, and how to say an entry in words.
type listing struct {
	kind, entries, name string
	page                func(ctx context.Context, gw *leasegate.Gateway, prefix, cursor *string) (*answer, error)
	words               func(entry json.RawMessage) (held, waiting string, err error)
}

// listPageSize is the limit asked of each page (the most the gateway accepts): fewer round trips.
const listPageSize = 1000

// maxListPages bounds a listing's walk; the gateway's SCAN ends far sooner.
const maxListPages = 1 << 20

var listings = []listing{
	{kind: "lock", entries: "locks", name: "lock", words: lockWords,
		page: func(ctx context.Context, gw *leasegate.Gateway, prefix, cursor *string) (*answer, error) {
			limit := listPageSize
			resp, err := gw.API.ListLocksWithResponse(ctx, &leasegate.ListLocksParams{Prefix: prefix, Cursor: cursor, Limit: &limit})
			if err != nil {
				return nil, err
			}
			return newAnswer(resp.HTTPResponse, resp.Body), nil
		}},
	{kind: "semaphore", entries: "semaphores", name: "name", words: semaphoreWords,
		page: func(ctx context.Context, gw *leasegate.Gateway, prefix, cursor *string) (*answer, error) {
			limit := listPageSize
			resp, err := gw.API.ListSemaphoresWithResponse(ctx, &leasegate.ListSemaphoresParams{Prefix: prefix, Cursor: cursor, Limit: &limit})
			if err != nil {
				return nil, err
			}
			return newAnswer(resp.HTTPResponse, resp.Body), nil
		}},
	{kind: "election", entries: "elections", name: "election", words: electionWords,
		page: func(ctx context.Context, gw *leasegate.Gateway, prefix, cursor *string) (*answer, error) {
			limit := listPageSize
			resp, err := gw.API.ListElectionsWithResponse(ctx, &leasegate.ListElectionsParams{Prefix: prefix, Cursor: cursor, Limit: &limit})
			if err != nil {
				return nil, err
			}
			return newAnswer(resp.HTTPResponse, resp.Body), nil
		}},
}

// listAll writes every entry of listing l under prefix to out, following next_cursor until the
// listing is complete.
func (c *command) listAll(ctx context.Context, l listing, prefix string, out listWriter) error {
	cursor := ""
	for range maxListPages {
		a, err := c.call(ctx, true, func(gw *leasegate.Gateway) (*answer, error) {
			return l.page(ctx, gw, optional(prefix), optional(cursor))
		})
		if err != nil {
			return err
		}
		if err := a.err(); err != nil {
			return err
		}
		var page map[string]json.RawMessage
		var entries []json.RawMessage
		if err := json.Unmarshal(a.body, &page); err != nil {
			return fmt.Errorf("listing %ss: %w", l.kind, err)
		}
		if err := json.Unmarshal(page[l.entries], &entries); err != nil {
			return fmt.Errorf("listing %ss: %w", l.kind, err)
		}
		for _, entry := range entries {
			if err := out.write(l, entry); err != nil {
				return err
			}
		}
		if err := json.Unmarshal(page["next_cursor"], &cursor); err != nil || cursor == "" {
			return err
		}
	}
	return fmt.Errorf("listing %ss: no end after %d pages", l.kind, maxListPages)
}

// listWriter writes a listing's entries, one line each.
type listWriter interface {
	write(l listing, entry json.RawMessage) error
	flush() error
}

// listJSON writes each entry with "kind" and "name" added, its keys sorted.
type listJSON struct{ w io.Writer }

func (j listJSON) write(l listing, entry json.RawMessage) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(entry, &fields); err != nil {
		return fmt.Errorf("listing %ss: %w", l.kind, err)
	}
	kind, _ := json.Marshal(l.kind)
	fields["kind"], fields["name"] = kind, fields[l.name]
	line, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(j.w, "%s\n", line)
	return err
}

func (listJSON) flush() error { return nil }

// listTable writes aligned columns, KIND NAME HELD WAITING, with a header before the first line.
type listTable struct {
	tw    *tabwriter.Writer
	lines int
}

func (t *listTable) write(l listing, entry json.RawMessage) error {
	var named map[string]json.RawMessage
	var name string
	if err := json.Unmarshal(entry, &named); err != nil {
		return fmt.Errorf("listing %ss: %w", l.kind, err)
	}
	_ = json.Unmarshal(named[l.name], &name)
	held, waiting, err := l.words(entry)
	if err != nil {
		return fmt.Errorf("listing %ss: %w", l.kind, err)
	}
	if t.lines == 0 {
		fmt.Fprintln(t.tw, "KIND\tNAME\tHELD BY\tWAITING")
	}
	t.lines++
	_, err = fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\n", l.kind, name, held, waiting)
	return err
}

func (t *listTable) flush() error { return t.tw.Flush() }

// shownHolders and shownWaiters are how many holders and waiters a line names; it counts the rest.
const (
	shownHolders = 3
	shownWaiters = 3
)

func lockWords(entry json.RawMessage) (held, waiting string, err error) {
	var l leasegate.ListedLock
	if err := json.Unmarshal(entry, &l); err != nil {
		return "", "", err
	}
	holders := []leasegate.ListedHolder{{Owner: l.Owner, Fence: l.Fence, AgeMs: l.AgeMs, TtlMs: l.TtlMs, Watchdog: l.Watchdog, Multilock: l.Multilock}}
	if l.Mode == leasegate.ModeShared {
		shared := leasegate.ListedHolderMode(leasegate.ModeShared)
		holders[0].Mode = &shared
	}
	if l.HeldBy != nil {
		holders = *l.HeldBy
	}
	return holdersWords(holders, l.Holders), waitersWords(l.Waiting, l.Waiters), nil
}

func semaphoreWords(entry json.RawMessage) (held, waiting string, err error) {
	var s struct {
		Permits, Used, Waiters int64
		HeldBy                 *[]leasegate.ListedHolder `json:"held_by"`
		Waiting                *[]leasegate.ListedWaiter
	}
	if err := json.Unmarshal(entry, &s); err != nil {
		return "", "", err
	}
	held = fmt.Sprintf("%d of %d permits", s.Used, s.Permits)
	if s.HeldBy != nil && len(*s.HeldBy) > 0 {
		held += ": " + holdersWords(*s.HeldBy, s.Used)
	}
	return held, waitersWords(s.Waiting, s.Waiters), nil
}

func electionWords(entry json.RawMessage) (held, waiting string, err error) {
	var e leasegate.ElectionState
	if err := json.Unmarshal(entry, &e); err != nil {
		return "", "", err
	}
	held = "vacant"
	if l := e.Leader; e.Led && l != nil {
		held = fmt.Sprintf("%q value %q, fence %d, leads for %s, %s left", l.Owner, l.Value, l.Fence,
			short(time.Since(l.Since)), short(time.Duration(l.TtlMs)*time.Millisecond))
	}
	waiting = "-"
	if e.Candidates > 0 {
		waiting = candidates(e.Candidates)
	}
	return held, waiting, nil
}

// candidates is "1 candidate", "2 candidates".
func candidates(n int64) string {
	if n == 1 {
		return "1 candidate"
	}
	return fmt.Sprintf("%d candidates", n)
}

// holdersWords names the first holders: `"a" fence 17, held 3.1s, 27s left; "b" shared …`, and
// counts the others of count.
func holdersWords(holders []leasegate.ListedHolder, count int64) string {
	var words []string
	for i, h := range holders {
		if i == shownHolders {
			break
		}
		if h.Redisson != nil && *h.Redisson {
			words = append(words, fmt.Sprintf("%q (Redisson's), %s left", h.Owner, short(time.Duration(h.TtlMs)*time.Millisecond)))
			continue
		}
		w := fmt.Sprintf("%q", h.Owner)
		if h.Mode != nil && *h.Mode == leasegate.ListedHolderMode(leasegate.ModeShared) {
			w += " shared"
		}
		w += fmt.Sprintf(" fence %d, held %s, %s left", h.Fence, short(time.Duration(h.AgeMs)*time.Millisecond), short(time.Duration(h.TtlMs)*time.Millisecond))
		if h.Watchdog {
			w += ", watchdog"
		}
		if h.Multilock != nil {
			w += ", multi-lock " + *h.Multilock
		}
		words = append(words, w)
	}
	if more := count - int64(len(words)); more > 0 {
		words = append(words, fmt.Sprintf("%d more", more))
	}
	return strings.Join(words, "; ")
}

// waitersWords is `2: "a" 1.2s, "b" shared 0.4s` (how many wait, then the first in line with how
// long each waited), or "-".
func waitersWords(waiting *[]leasegate.ListedWaiter, count int64) string {
	if count == 0 {
		return "-"
	}
	words := []string{}
	if waiting != nil {
		for i, w := range *waiting {
			if i == shownWaiters {
				break
			}
			s := fmt.Sprintf("%q", w.Owner)
			if w.Mode != nil && *w.Mode == leasegate.ListedWaiterMode(leasegate.ModeShared) {
				s += " shared"
			}
			if w.Multilock != nil {
				s += " (multi-lock " + *w.Multilock + ")"
			}
			words = append(words, s+" "+short(time.Duration(w.WaitedMs)*time.Millisecond))
		}
	}
	if more := count - int64(len(words)); len(words) > 0 && more > 0 {
		words = append(words, fmt.Sprintf("%d more", more))
	}
	if len(words) == 0 {
		return fmt.Sprint(count)
	}
	return fmt.Sprintf("%d: %s", count, strings.Join(words, ", "))
}

// short writes d for a person: 0.4s, 9.9s, 12s, 1m, 3m12s, 2h, 2h5m.
func short(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", d.Round(time.Second)/time.Second)
	case d < time.Hour:
		return twoUnits(d.Round(time.Second), time.Minute, "m", time.Second, "s")
	}
	return twoUnits(d.Round(time.Minute), time.Hour, "h", time.Minute, "m")
}

// twoUnits writes d as whole units and the rest in subs, without a rest of 0: 3m12s, 2h.
func twoUnits(d, unit time.Duration, unitName string, sub time.Duration, subName string) string {
	s := fmt.Sprintf("%d%s", d/unit, unitName)
	if rest := d % unit / sub; rest > 0 {
		s += fmt.Sprintf("%d%s", rest, subName)
	}
	return s
}
