package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// eventID is an election event's id, as GET /elections/{name}/events sends it (<ms>-<seq>).
var eventID = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

// observe prints an election's leaders, one event a line (state, elected, proclaimed, resigned,
// vacant, each with its id), until SIGINT or SIGTERM (exit 0). It follows the election's log
// through the SDK's Observe: a stream that ends is reopened through the --server replicas in turn
// with the last id as Last-Event-ID, so that no event is missed or printed twice while the log
// still holds it (a state event marked as a gap says when it did not). --after ID starts after an
// event an earlier observe printed, instead of with the election's state.
//
// Observe retries a gateway that refuses the stream; observe reads the election once first, so
// that a bad name, a missing key or permission, or a gateway without elections exits 3 at once.
func (c *command) observe(ctx context.Context, args []string) int {
	f := c.flags("observe", "NAME [--after ID] [--json] [--server URL]")
	after := f.fs.String("after", "", "go on after this event `id` (one an earlier observe printed), instead of starting with the election's state")
	asJSON := f.fs.Bool("json", false, `one JSON object a line for scripts: "id", "event", "at", and the event's "owner", "fence", "value", "state", "gap"`)
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if _, code, ok := c.parse(f, args); !ok {
		return code
	}
	rest := f.fs.Args()
	if name == "" && len(rest) > 0 {
		name, rest = rest[0], rest[1:] // NAME after the flags: the parse stopped at it
	}
	switch {
	case name == "":
		return c.usageError(f, "observe needs the election's NAME")
	case len(rest) > 0:
		return c.usageError(f, fmt.Sprintf("observe takes one NAME, got %q too", rest[0]))
	case *after != "" && !eventID.MatchString(*after):
		return c.usageError(f, fmt.Sprintf("--after must be an event id as observe prints them (<ms>-<seq>, e.g. 1795455484376-0), got %q", *after))
	}
	if _, err := c.electionState(ctx, name); err != nil {
		return c.fail(err)
	}
	out := observePrinter{w: c.stdout, json: *asJSON}
	for ev := range c.gateways[0].Observe(ctx, name, *after, c.gateways[1:]...) {
		if err := out.print(ev); err != nil {
			return c.fail(err)
		}
	}
	return 0
}

// observePrinter prints an election's events.
type observePrinter struct {
	w    io.Writer
	json bool
}

// observedEvent is an election's event as --json prints it.
type observedEvent struct {
	ID    string                   `json:"id"`
	Event string                   `json:"event"`
	At    time.Time                `json:"at"`
	Owner string                   `json:"owner,omitempty"`
	Fence int64                    `json:"fence,omitempty"`
	Value *string                  `json:"value,omitempty"`
	State *leasegate.ElectionState `json:"state,omitempty"`
	Gap   bool                     `json:"gap,omitempty"`
}

// print writes one event: `<at> elected "o" value "v", fence 17 (id 1795455484376-0)`.
func (p observePrinter) print(ev leasegate.ElectionEvent) error {
	if p.json {
		e := observedEvent{ID: ev.ID, Event: ev.Type, At: ev.At, Owner: ev.Owner, Fence: ev.Fence, State: ev.State, Gap: ev.Gap}
		if ev.Type == "elected" || ev.Type == "proclaimed" {
			e.Value = &ev.Value
		}
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", line)
		return err
	}
	var words string
	switch ev.Type {
	case "state":
		words = "vacant"
		if st := ev.State; st != nil && st.Led && st.Leader != nil {
			words = fmt.Sprintf("led by %q value %q, fence %d", st.Leader.Owner, st.Leader.Value, st.Leader.Fence)
		}
		if ev.State != nil {
			words += "; " + candidates(ev.State.Candidates)
		}
		if ev.Gap {
			words = "(events were missed: the log no longer holds them) " + words
		}
	case "elected", "proclaimed":
		words = fmt.Sprintf("%q value %q, fence %d", ev.Owner, ev.Value, ev.Fence)
	default: // resigned, vacant
		words = fmt.Sprintf("%q, fence %d", ev.Owner, ev.Fence)
	}
	_, err := fmt.Fprintf(p.w, "%s %s %s (id %s)\n", stamp(ev.At), ev.Type, words, ev.ID)
	return err
}
