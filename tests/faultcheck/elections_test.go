package faultcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// An election under the fault checker: its candidates are the workload's clients (workload_test.go),
// whose leads the history checks as any lock's holders (at most one valid leader at a time,
// judged by fences). Beside them, an observer follows the election's events from the start of the
// run to its end, reconnecting with Last-Event-ID to another replica whenever its stream ends (its
// replica killed or stopped), as an EventSource does; the check then reads the whole log once more
// and holds both to what docs/elections.md promises an observer.

// observed is one event an observer read.
type observed struct {
	id, typ, owner string
	fence          int64
	gap            bool  // a state sent for a gap in the log
	leader         int64 // a state's leader's fence (0: nobody leads)
}

// observer is the run's observer of the election: what it read, and how often it (re)connected.
type observer struct {
	mu       sync.Mutex
	events   []observed
	connects int
	last     string // the id of the last event read
	stop     chan struct{}
	done     chan struct{}
}

func (o *observer) lastID() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// election is the run's election name ("" on RedLock, which offers none).
func (fc *faultCheck) election() string {
	for _, name := range fc.locks {
		if isElection(name) {
			return name
		}
	}
	return ""
}

// observe follows election's events until o.stop closes, on a random live replica, resuming after
// the last event read whenever a stream ends or cannot be opened.
func (fc *faultCheck) observe(election string, o *observer) {
	defer close(o.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-o.stop:
			cancel()
		case <-o.done:
		}
	}()
	rng := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
	for ctx.Err() == nil {
		fc.mu.Lock()
		base := fc.gateways[rng.IntN(len(fc.gateways))].URL
		fc.mu.Unlock()
		o.mu.Lock()
		o.connects++
		last := o.last
		o.mu.Unlock()
		_ = readEvents(ctx, base, election, last, func(ev observed) bool {
			o.mu.Lock()
			o.events = append(o.events, ev)
			o.last = ev.id
			o.mu.Unlock()
			return true
		})
		pause := time.NewTimer(50 * time.Millisecond)
		select { // reconnection back-off
		case <-pause.C:
		case <-ctx.Done():
		}
	}
}

// readEvents reads election's events from base after last ("": from a state), handing each to
// each (not "closed", which has no id) until each returns false, the stream ends or ctx does.
func readEvents(ctx context.Context, base, election, last string, each func(observed) bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path(election)+"/events", nil)
	if err != nil {
		return err
	}
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET events: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev observed
	var data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.typ != "" && ev.typ != "closed" {
				var d struct {
					Owner  string `json:"owner"`
					Fence  int64  `json:"fence"`
					Gap    bool   `json:"gap"`
					Leader *struct {
						Fence int64 `json:"fence"`
					} `json:"leader"`
				}
				if err := json.Unmarshal([]byte(data), &d); err != nil {
					return err
				}
				ev.owner, ev.fence, ev.gap = d.Owner, d.Fence, d.Gap
				if d.Leader != nil {
					ev.leader = d.Leader.Fence
				}
				if !each(ev) {
					return nil
				}
			}
			ev, data = observed{}, ""
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	return sc.Err()
}

// finishObserving waits (up to 30 s) for the observer to read up to the log's last event, which
// it returns, then stops the observer, and reads the whole log once more (from "0-0").
func (fc *faultCheck) finishObserving(election string, o *observer) (last string, log []observed, problems []string) {
	c := fc.client(rand.New(rand.NewPCG(4, 5)))
	r, err := c.Send(context.Background(), http.MethodGet, path(election), nil, "")
	if err != nil || r.Status != http.StatusOK {
		close(o.stop)
		<-o.done
		return "", nil, []string{fmt.Sprintf("reading the election at the end failed: %v", err)}
	}
	last = r.Str("last_event_id")
	deadline := time.Now().Add(30 * time.Second)
	for o.lastID() != last && time.Now().Before(deadline) {
		poll := time.NewTimer(50 * time.Millisecond)
		<-poll.C // polling back-off
	}
	if got := o.lastID(); got != last {
		problems = append(problems, fmt.Sprintf("the observer's last event is %q, 30 s after the log's last was %q", got, last))
	}
	close(o.stop)
	<-o.done
	fc.mu.Lock()
	base := fc.gateways[0].URL
	fc.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = readEvents(ctx, base, election, "0-0", func(ev observed) bool {
		log = append(log, ev)
		return ev.id != last
	})
	if err != nil || (len(log) > 0 && log[len(log)-1].id != last) || (len(log) == 0 && last != "0-0") {
		problems = append(problems, fmt.Sprintf("reading the whole log failed (%v) or stopped short of %q", err, last))
	}
	return last, log, problems
}

// checkLeaders holds a sequence of an election's events to what an observer is promised: a leader
// is elected only once the one before has ended (resigned, vacant), every event about a leader
// names its fence, and leaders' fences strictly increase. A state (the first, or one for a gap)
// tells where the election stands and starts the check afresh from there, fences still increasing.
func checkLeaders(what string, events []observed) []string {
	var out []string
	var cur, top int64
	for _, ev := range events {
		switch ev.typ {
		case "state":
			cur, top = ev.leader, max(top, ev.leader)
		case "elected":
			if cur != 0 {
				out = append(out, fmt.Sprintf("%s: %s (fence %d) elected at %s while %d still led", what, ev.owner, ev.fence, ev.id, cur))
			}
			if ev.fence <= top {
				out = append(out, fmt.Sprintf("%s: %s elected at %s with fence %d, not above %d", what, ev.owner, ev.id, ev.fence, top))
			}
			cur, top = ev.fence, max(top, ev.fence)
		case "proclaimed", "resigned", "vacant":
			if ev.fence != cur {
				out = append(out, fmt.Sprintf("%s: %s %s at %s names fence %d, the leader's is %d", what, ev.owner, ev.typ, ev.id, ev.fence, cur))
			}
			if ev.typ != "proclaimed" {
				cur = 0
			}
		default:
			out = append(out, fmt.Sprintf("%s: unknown event %q at %s", what, ev.typ, ev.id))
		}
	}
	return out
}

// checkElection adds to rep what the observer and the whole log show: both keep the leaders'
// order (checkLeaders), and under keepsGrants every lead a client was answered 201 for is in the
// log (`elected` with its fence and owner); elsewhere those missing are counted. The observer's
// gaps are counted everywhere: a `resigned` or `vacant` is not acknowledged by replicas (as a
// release is not), and one a failover loses shows as a gap to a stream that had read it.
func (fc *faultCheck) checkElection(rep *report, election string, o *observer, log []observed) {
	o.mu.Lock()
	seen, connects := o.events, o.connects
	o.mu.Unlock()
	// The observer's order is a promise where the deployment keeps what it acknowledged; where it
	// may lose writes, a stream that stayed on a master that was then dropped may have read what
	// the survivor never had, and the disorder is counted. The whole log, read at the end from the
	// survivor, is in order everywhere: each entry is written by a script that reads the same data.
	disorder := checkLeaders("observer", seen)
	if fc.mode.promise == keepsGrants {
		rep.add("election order", disorder...)
	}
	rep.add("election order", checkLeaders("log", log)...)
	gaps := 0
	for _, ev := range seen[min(1, len(seen)):] {
		if ev.typ == "state" {
			gaps++
		}
	}
	elected := map[int64]string{}
	for _, ev := range log {
		if ev.typ == "elected" {
			elected[ev.fence] = ev.owner
		}
	}
	missing := 0
	fc.h.mu.Lock()
	for _, g := range fc.h.grants {
		if g.lock != election {
			continue
		}
		if owner, ok := elected[g.fence]; !ok || owner != g.owner {
			missing++
			if fc.mode.promise == keepsGrants {
				rep.add("election log", fmt.Sprintf("%s (fence %d), answered 201 at %s, is not elected in the log",
					g.owner, g.fence, g.answered.Format("15:04:05.000")))
			}
		}
	}
	fc.h.mu.Unlock()
	rep.election = fmt.Sprintf("; election: %d events in the log, %d leaders, the observer read %d events over %d connections "+
		"(%d gaps, %d out of order), %d leads answered 201 not in the log", len(log), len(elected), len(seen), connects, gaps, len(disorder), missing)
}
