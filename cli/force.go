package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// forceRelease takes every hold off a lock, a semaphore or an election, whoever holds it (DELETE
// ...?force=true, an operator's call: the admin permission), and prints one line per hold it
// removed, with its owner and fence. The answer only counts them, so force-release learns who they
// were where the gateway tells it: for a lock or a semaphore, from its events stream, opened before
// the force (its forced event lists the holds removed); for an election, from its log (the vacant
// the force wrote). When that cannot tell (a gateway without events streams, one refused), it
// names the holders it read just before the force, saying so on stderr.
//
// A force release is never sent twice: a retry would take the hold of the waiter the first one let
// in. Only a request that cannot have reached a replica (connection refused) goes to the next.
func (c *command) forceRelease(ctx context.Context, args []string) int {
	f := c.flags("force-release", "(--lock NAME | --semaphore NAME | --election NAME) [--server URL]")
	t, code, ok := c.parse(f, args)
	if !ok {
		return code
	}
	if f.fs.NArg() > 0 {
		return c.usageError(f, fmt.Sprintf("force-release takes no arguments, got %q", f.fs.Arg(0)))
	}
	if t.election != "" {
		return c.forceElection(ctx, t)
	}
	return c.forceHolds(ctx, t)
}

// removedHold is one hold a force release took away.
type removedHold struct {
	owner string
	fence int64
	mode  string // a lock's: exclusive or shared; "" for a permit
}

// forceHolds force-releases a lock or a semaphore and prints what it removed.
func (c *command) forceHolds(ctx context.Context, t target) int {
	stream, before, why := c.holdsBefore(ctx, t)
	if stream != nil {
		defer stream.close()
	}
	removed, err := c.force(ctx, t)
	if err != nil {
		return c.fail(err)
	}
	if removed == 0 {
		fmt.Fprintf(c.stdout, "%s was not held: nothing removed\n", t)
		return 0
	}
	var holds []removedHold
	if stream != nil {
		holds, why = stream.forced(removed, 5*time.Second)
	}
	if holds == nil {
		fmt.Fprintf(c.stderr, "leasegate: the gateway did not say which holds the force release removed (%v): these held %s just before\n", why, t)
		holds = before
	}
	for _, h := range holds {
		c.printRemoved(t, h)
	}
	return 0
}

// holdsBefore opens t's events stream and reads its first event, the holds as they are; when the
// stream cannot be opened, it reads them with an inspect instead, and why says why not the stream.
func (c *command) holdsBefore(ctx context.Context, t target) (stream *eventStream, before []removedHold, why error) {
	for _, gw := range c.gateways {
		if stream, why = t.openEvents(ctx, gw); !unsentErr(why) {
			break
		}
	}
	if stream != nil {
		// The state comes at once; a stream that sends nothing is of no use here.
		stop := time.AfterFunc(5*time.Second, stream.cancel)
		ev, err := stream.next()
		stop.Stop()
		if err == nil && ev.typ == "state" {
			return stream, holdsOfState(t, ev.data), nil
		}
		stream.close()
		why = fmt.Errorf("its events stream sent no state: %v", err)
	}
	a, err := c.call(ctx, true, func(gw *leasegate.Gateway) (*answer, error) { return t.inspect(ctx, gw, "") })
	if err == nil && a.err() == nil {
		before = holdsOfState(t, a.body)
	}
	return nil, before, why
}

// unsentErr reports whether err says that a request never reached the gateway (see unsent).
func unsentErr(err error) bool { return err != nil && unsent(err) }

// holdsOfState reads the holds in a lock's or a semaphore's state (GET /locks/{name}, the state
// event): a lock's exclusive holder, then its shared holders, or a semaphore's permits.
func holdsOfState(t target, state []byte) []removedHold {
	var st struct {
		Owner   *string
		Fence   *int64
		Holders []leasegate.Holder
	}
	if json.Unmarshal(state, &st) != nil {
		return nil
	}
	var holds []removedHold
	if st.Owner != nil && st.Fence != nil {
		holds = append(holds, removedHold{owner: *st.Owner, fence: *st.Fence, mode: string(leasegate.ModeExclusive)})
	}
	for _, h := range st.Holders {
		mode := string(leasegate.ModeShared)
		if t.semaphore != "" {
			mode = ""
		}
		holds = append(holds, removedHold{owner: h.Owner, fence: h.Fence, mode: mode})
	}
	return holds
}

// forced reads the stream until the forced event of a force release that removed removed holds,
// for at most within, and returns the holds it names; nil, and why, when none came.
func (s *eventStream) forced(removed int64, within time.Duration) (holds []removedHold, why error) {
	stop := time.AfterFunc(within, s.cancel)
	defer stop.Stop()
	for {
		ev, err := s.next()
		if err != nil {
			return nil, fmt.Errorf("no forced event on its events stream: %v", err)
		}
		var e heldEvent
		if ev.typ != "forced" || json.Unmarshal(ev.data, &e) != nil || e.HoldsRemoved != removed {
			continue // another change, or another operator's force release
		}
		holds = make([]removedHold, 0, len(e.Holds))
		for _, h := range e.Holds {
			holds = append(holds, removedHold{owner: h.Owner, fence: h.Fence, mode: h.Mode})
		}
		return holds, nil
	}
}

// force sends t's force release (through the next replica only when it cannot have reached one)
// and returns how many holds it removed.
func (c *command) force(ctx context.Context, t target) (removed int64, err error) {
	var a *answer
	for _, gw := range c.gateways {
		if a, err = t.force(ctx, gw); !unsentErr(err) {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	if err := a.err(); err != nil {
		return 0, err
	}
	var r struct {
		HoldsRemoved int64 `json:"holds_removed"`
	}
	if err := json.Unmarshal(a.body, &r); err != nil {
		return 0, fmt.Errorf("the force release's answer: %w", err)
	}
	return r.HoldsRemoved, nil
}

// force sends DELETE ?force=true for t through gw.
func (t target) force(ctx context.Context, gw *leasegate.Gateway) (*answer, error) {
	switch {
	case t.election != "":
		force := leasegate.ResignParamsForceTrue
		resp, err := gw.API.ResignWithResponse(ctx, t.election, &leasegate.ResignParams{Force: &force})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	case t.semaphore != "":
		force := leasegate.ReleaseSemaphoreParamsForceTrue
		resp, err := gw.API.ReleaseSemaphoreWithResponse(ctx, t.semaphore, &leasegate.ReleaseSemaphoreParams{Force: &force})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	}
	force := leasegate.ReleaseLockParamsForceTrue
	resp, err := gw.API.ReleaseLockWithResponse(ctx, t.lock, &leasegate.ReleaseLockParams{Force: &force})
	if err != nil {
		return nil, err
	}
	return newAnswer(resp.HTTPResponse, resp.Body), nil
}

// printRemoved prints one removed hold: `force-released lock "a": removed the exclusive hold of
// "o", fence 17`.
func (c *command) printRemoved(t target, h removedHold) {
	what := "the hold"
	switch {
	case t.election != "":
		what = "the lead"
	case t.semaphore != "":
		what = "the permit"
	case h.mode != "":
		what = "the " + h.mode + " hold"
	}
	fmt.Fprintf(c.stdout, "force-released %s: removed %s of %q, fence %d\n", t, what, h.owner, h.fence)
}

// forceElection force-releases an election's lead and prints whose it was. The force writes a
// vacant event to the election's log before it answers; the log between the ids read just before
// and just after the force holds it (the last vacant there).
func (c *command) forceElection(ctx context.Context, t target) int {
	before, err := c.electionState(ctx, t.election)
	if err != nil {
		return c.fail(err)
	}
	removed, err := c.force(ctx, t)
	if err != nil {
		return c.fail(err)
	}
	if removed == 0 {
		fmt.Fprintf(c.stdout, "%s was not led: nothing removed\n", t)
		return 0
	}
	afterID := ""
	if after, err := c.electionState(ctx, t.election); err == nil {
		afterID = after.LastEventId
	}
	lead, why := c.vacated(ctx, t.election, before.LastEventId, afterID)
	if lead == nil && before.Leader != nil {
		fmt.Fprintf(c.stderr, "leasegate: the election's log did not say whose lead the force release removed (%v): this one led %s just before\n", why, t)
		lead = &removedHold{owner: before.Leader.Owner, fence: before.Leader.Fence}
	}
	if lead == nil {
		fmt.Fprintf(c.stdout, "force-released %s: removed the lead (the election's log did not say whose: %v)\n", t, why)
		return 0
	}
	c.printRemoved(t, *lead)
	return 0
}

// electionState reads an election (GET /elections/{name}) through the replicas in turn.
func (c *command) electionState(ctx context.Context, name string) (*leasegate.ElectionState, error) {
	a, err := c.call(ctx, true, func(gw *leasegate.Gateway) (*answer, error) {
		return target{election: name}.inspect(ctx, gw, "")
	})
	if err != nil {
		return nil, err
	}
	if err := a.err(); err != nil {
		return nil, err
	}
	var st leasegate.ElectionState
	if err := json.Unmarshal(a.body, &st); err != nil {
		return nil, fmt.Errorf("election %q: %w", name, err)
	}
	return &st, nil
}

// vacated reads election name's log after fromID up to toID ("" for: as far as it goes within a
// few seconds) and returns the lead the last vacant there ended; nil, and why, when it finds none.
func (c *command) vacated(ctx context.Context, name, fromID, toID string) (*removedHold, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	events := c.gateways[0].Observe(ctx, name, fromID, c.gateways[1:]...)
	defer func() {
		cancel()
		for range events { // closed once Observe's goroutine has seen ctx end
		}
	}()
	var lead *removedHold
	for ev := range events {
		switch ev.Type {
		case "state": // the log no longer holds what followed fromID
			return nil, errors.New("the log no longer holds the events of the force release")
		case "vacant":
			lead = &removedHold{owner: ev.Owner, fence: ev.Fence}
		}
		if ev.ID == toID {
			break
		}
	}
	if lead == nil {
		return nil, errors.New("no vacant event in its log")
	}
	return lead, nil
}
