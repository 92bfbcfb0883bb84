package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// Reopening a stream that ended pauses between these, doubling while reopening fails, as the
// SDK's watchers and observers do.
const (
	reopenPauseMin = 100 * time.Millisecond
	reopenPauseMax = 5 * time.Second
)

// watch prints a lock's or a semaphore's live events (GET /locks/{name}/events or
// /semaphores/{name}/events), one a line, until SIGINT or SIGTERM (exit 0). The stream starts with
// the name's state. When it ends (a replica restarting or shut down, LEASEGATE_MAX_STREAM_LIFETIME,
// a dropped connection), watch says so on stderr and reopens it through the --server replicas in
// turn, as the SDK's watchers do; the new stream starts with a fresh state, since a lock's stream
// keeps nothing to replay (it ignores Last-Event-ID). A refusal (a bad name, no key, no permission,
// RedLock's 501) ends watch with exit 3; other failures are retried.
func (c *command) watch(ctx context.Context, args []string) int {
	f := c.flags("watch", "(--lock NAME | --semaphore NAME) [--json] [--server URL]")
	asJSON := f.fs.Bool("json", false, `one JSON object a line for scripts: the event's data, with "event"`)
	t, code, ok := c.parse(f, args)
	if !ok {
		return code
	}
	if f.fs.NArg() > 0 {
		return c.usageError(f, fmt.Sprintf("watch takes no arguments, got %q", f.fs.Arg(0)))
	}
	out := watchPrinter{w: c.stdout, t: t, json: *asJSON}
	pause := reopenPauseMin
	failing := false // said once until a stream opens again
	for via := 0; ctx.Err() == nil; via++ {
		gw := c.gateways[via%len(c.gateways)]
		stream, err := t.openEvents(ctx, gw)
		switch {
		case ctx.Err() != nil:
		case err != nil && refusal(err):
			return c.fail(err)
		case err != nil:
			if !failing {
				fmt.Fprintf(c.stderr, "leasegate: opening the events stream of %s: %v; trying again until it opens\n", t, err)
			}
			failing = true
		default:
			failing = false
			delivered, err := out.follow(stream)
			stream.close()
			if err != nil {
				return c.fail(err)
			}
			if delivered {
				pause = reopenPauseMin
			}
			if ctx.Err() == nil {
				fmt.Fprintf(c.stderr, "leasegate: the events stream of %s ended; reopening it\n", t)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause/2 + rand.N(pause/2+1)):
		}
		pause = min(2*pause, reopenPauseMax)
	}
	return 0
}

// watchPrinter prints a lock's or a semaphore's events.
type watchPrinter struct {
	w    io.Writer
	t    target
	json bool
}

// follow prints stream's events until it ends, and reports whether it printed any. A closed event
// that says the stream's credential is refused ends it with that error.
func (p watchPrinter) follow(stream *eventStream) (delivered bool, err error) {
	for {
		ev, err := stream.next()
		if err != nil {
			return delivered, nil
		}
		delivered = true
		if err := p.print(ev); err != nil {
			return delivered, err
		}
		if ev.Type == "closed" {
			var e heldEvent
			_ = json.Unmarshal(ev.Data, &e)
			if e.Reason == "unauthenticated" || e.Reason == "forbidden" {
				return delivered, fmt.Errorf("the gateway closed the events stream of %s: %s: %s", p.t, e.Reason, e.Detail)
			}
			return delivered, nil // its lifetime: reopen at once
		}
	}
}

// print writes one event: its data with "event" added (--json), or a line for a person.
func (p watchPrinter) print(ev leasegate.Event) error {
	if p.json {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(ev.Data, &fields); err != nil || fields == nil {
			fields = map[string]json.RawMessage{"data": json.RawMessage(ev.Data)}
			if !json.Valid(ev.Data) {
				fields["data"], _ = json.Marshal(string(ev.Data))
			}
		}
		fields["event"], _ = json.Marshal(ev.Type)
		line, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", line)
		return err
	}
	var e heldEvent
	_ = json.Unmarshal(ev.Data, &e)
	_, err := fmt.Fprintf(p.w, "%s %s %s\n", stamp(e.At), ev.Type, p.words(ev, e))
	return err
}

// stamp writes an event's time, RFC 3339 in UTC with milliseconds ("-" when it has none).
func stamp(at time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return at.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// words says what an event tells: `"o" exclusive, fence 17; 2 waiting`.
func (p watchPrinter) words(ev leasegate.Event, e heldEvent) string {
	hold := fmt.Sprintf("%q", e.Owner)
	if e.Mode != "" {
		hold += " " + e.Mode
	}
	hold += fmt.Sprintf(", fence %d", e.Fence)
	switch ev.Type {
	case "state":
		return p.stateWords(ev.Data)
	case "granted":
		return hold + waitingWords(e.Waiters)
	case "handed-off", "released", "expired":
		return hold
	case "forced":
		removed := make([]string, 0, len(e.Holds))
		for _, h := range e.Holds {
			removed = append(removed, fmt.Sprintf("%q fence %d", h.Owner, h.Fence))
		}
		return fmt.Sprintf("removed %d: %s", e.HoldsRemoved, strings.Join(removed, ", "))
	case "waiters":
		if e.Waiters != nil {
			return fmt.Sprint(*e.Waiters)
		}
	case "closed":
		return e.Reason + ": " + e.Detail
	}
	return string(ev.Data)
}

// waitingWords is `; 2 waiting` for a count the event carries, "" without one.
func waitingWords(waiters *int64) string {
	if waiters == nil {
		return ""
	}
	return fmt.Sprintf("; %d waiting", *waiters)
}

// stateWords says a state event's holds: `held by "o" exclusive, fence 17, 27s left; 1 waiting`,
// `held shared by 2: "a" fence 1, "b" fence 2; 0 waiting`, `free; 0 waiting`, or a semaphore's
// `2 of 5 permits: "a" fence 1, "b" fence 2; 0 waiting`.
func (p watchPrinter) stateWords(data []byte) string {
	var st struct {
		Held            bool
		Owner           *string
		Fence           *int64
		TtlMs           *int64 `json:"ttl_ms"`
		Holders         []leasegate.Holder
		HolderCount     *int64 `json:"holder_count"`
		Permits, Used   int64
		Waiters         int64
		RedissonHolders *[]leasegate.RedissonHolder `json:"redisson_holders"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return string(data)
	}
	holders := make([]string, 0, len(st.Holders))
	for i, h := range st.Holders {
		if i == shownHolders {
			break
		}
		holders = append(holders, fmt.Sprintf("%q fence %d", h.Owner, h.Fence))
	}
	count := int64(len(st.Holders))
	if st.HolderCount != nil {
		count = *st.HolderCount
	}
	if more := count - int64(len(holders)); more > 0 {
		holders = append(holders, fmt.Sprintf("%d more", more))
	}
	waiting := fmt.Sprintf("; %d waiting", st.Waiters)
	switch {
	case p.t.semaphore != "":
		s := fmt.Sprintf("%d of %d permits", st.Used, st.Permits)
		if len(holders) > 0 {
			s += ": " + strings.Join(holders, ", ")
		}
		return s + waiting
	case st.Owner != nil && st.Fence != nil:
		s := fmt.Sprintf("held by %q exclusive, fence %d", *st.Owner, *st.Fence)
		if st.TtlMs != nil {
			s += ", " + short(time.Duration(*st.TtlMs)*time.Millisecond) + " left"
		}
		return s + waiting
	case len(holders) > 0:
		return fmt.Sprintf("held shared by %d: %s", count, strings.Join(holders, ", ")) + waiting
	case st.Held: // by Redisson's clients alone
		return "held by Redisson's clients" + waiting
	}
	return "free" + waiting
}
