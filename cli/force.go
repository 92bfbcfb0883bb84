package cli

import (
	"context"
	"encoding/json"
	"fmt"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// forceRelease takes every hold off a lock, a semaphore or an election, whoever holds it (DELETE
// ...?force=true, an operator's call: the admin permission), and prints one line per hold it
// removed, with its owner and fence, as the gateway's answer lists them (`removed`). A gateway from
// before that list only counts them: force-release then says how many, and that it was not told
// whose.
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
	var a *answer
	var err error
	for _, gw := range c.gateways {
		if a, err = t.force(ctx, gw); err == nil || !unsent(err) {
			break
		}
	}
	if err == nil {
		err = a.err()
	}
	if err != nil {
		return c.fail(err)
	}
	var r struct {
		HoldsRemoved int64                    `json:"holds_removed"`
		Removed      *[]leasegate.RemovedHold `json:"removed"`
	}
	if err := json.Unmarshal(a.body, &r); err != nil {
		return c.fail(fmt.Errorf("the force release's answer: %w", err))
	}
	switch {
	case r.HoldsRemoved == 0 && t.election != "":
		fmt.Fprintf(c.stdout, "%s was not led: nothing removed\n", t)
	case r.HoldsRemoved == 0:
		fmt.Fprintf(c.stdout, "%s was not held: nothing removed\n", t)
	case r.Removed == nil:
		fmt.Fprintf(c.stdout, "force-released %s: removed %d hold(s)\n", t, r.HoldsRemoved)
		fmt.Fprintf(c.stderr, "leasegate: the gateway did not say whose holds it removed (a gateway older than this command)\n")
	default:
		for _, h := range *r.Removed {
			c.printRemoved(t, h)
		}
	}
	return 0
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
// "o", fence 17` (a multi-lock member's: `..., fence 17, of multi-lock m-...`).
func (c *command) printRemoved(t target, h leasegate.RemovedHold) {
	what := "the " + string(h.Mode) + " hold"
	switch {
	case t.election != "":
		what = "the lead"
	case t.semaphore != "":
		what = "the permit"
	}
	group := ""
	if h.Multilock != nil && *h.Multilock != "" {
		group = ", of multi-lock " + *h.Multilock
	}
	fence := fmt.Sprintf("fence %d", h.Fence)
	if h.Fence == 0 {
		fence = "no fence (a Redisson client's hold)"
	}
	fmt.Fprintf(c.stdout, "force-released %s: removed %s of %q, %s%s\n", t, what, h.Owner, fence, group)
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
