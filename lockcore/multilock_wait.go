package lockcore

import (
	"context"
	"errors"
	"time"
)

// minWaitHold is the shortest lease a waiting group holds its members under while it waits for
// the rest (its own TTL when longer): renewing a shorter one would cost a Redis round trip every few
// milliseconds, and members would run out between renewals. The grant then sets the group's TTL.
const minWaitHold = time.Second

// lockInOrder is a waiting multi-lock's way in once its all-or-nothing try failed: it takes the
// members one by one in name order, each through the same wait as a single acquire (waitAs: FIFO
// in that member's line, direct hand-off), holding the members it already has while it waits for
// the next.
//
// No deadlock: every waiter, single or group, waits for one lock at a time, and a group holds only
// members that sort before the one it waits for. A chain of waits-for therefore climbs in name
// order (or, within one line, in arrival order) and cannot close into a cycle.
//
// The members it holds meanwhile are leased for max(req.TTL, minWaitHold), without a watchdog, and
// renewed by this call every third of that (it waits in slices that long, keeping its place with
// the queue ticket each slice ends with), so a replica that dies mid-wait frees them within that
// lease. Redis errors are ridden out until the wait ends, as a single waiter does. When the wait
// runs out or ctx ends it gives back what it took (and waitAs has left the line); if giving back
// fails it answers ErrUnavailable, not 409, since the members then stay held until they run out.
// If a held member is lost meanwhile (a Redis restart), it gives back the rest and starts over
// within the wait. The final step confirms every member at once and starts the group's TTL and
// max hold from then.
func (s *Service) lockInOrder(ctx context.Context, req MultiRequest, m MultiLease, start time.Time) (MultiGrant, error) {
	deadline := start.Add(req.Wait)
	hold := max(req.TTL, minWaitHold)
	held := 0 // m.Locks[:held] are ours
	ticket := ""
	giveUp := func(err error) (MultiGrant, error) {
		if held > 0 {
			if _, rerr := s.releaseGroup(context.WithoutCancel(ctx), MultiLease{ID: m.ID, Locks: m.Locks[:held], Mode: m.Mode}); rerr != nil {
				s.log.Warn("giving back the members a waiting multi-lock took failed; they run out within their lease", "multilock", m.ID, "lease", hold, "err", rerr)
				return MultiGrant{}, rerr
			}
		}
		// A member's queue ticket is no use to the group's retry: drop it.
		var (
			heldErr     *HeldError
			shutdownErr *ShutdownError
		)
		switch {
		case errors.As(err, &heldErr):
			heldErr.Locks, heldErr.Waited, heldErr.QueueTicket = []string{heldErr.Lock}, time.Since(start), ""
		case errors.As(err, &shutdownErr):
			err = errShuttingDown
		}
		return MultiGrant{}, err
	}
	for {
		for held < len(m.Locks) {
			slice := time.Until(deadline)
			if held > 0 {
				slice = min(slice, hold/3)
			}
			if slice <= 0 {
				return giveUp(&HeldError{Lock: m.Locks[held], RetryAfter: s.cfg.claimTTL})
			}
			member := AcquireRequest{Lock: m.Locks[held], Mode: req.Mode, Owner: req.Owner, TTL: hold, Wait: slice,
				QueueTicket: ticket}
			_, err := s.waitAs(ctx, member, m.ID)
			var heldErr *HeldError
			switch {
			case err == nil:
				held, ticket = held+1, ""
				continue
			case held == 0 || ctx.Err() != nil || !time.Now().Before(deadline):
				return giveUp(err)
			case errors.As(err, &heldErr): // a slice ended: queue again at our place after renewing
				ticket = heldErr.QueueTicket
			case errors.Is(err, ErrUnavailable) && s.ctx.Err() == nil: // ride it out, as a single waiter does
				ticket = ""
				if !pause(ctx) {
					return giveUp(ctx.Err())
				}
			default:
				return giveUp(err)
			}
			_, err = s.renewGroup(ctx, m, m.Locks[:held], hold, false)
			var lost *GroupLostError
			if errors.As(err, &lost) { // the rest was given back: start over
				held, ticket = 0, ""
			}
		}
		// Every member is ours: confirm them together, with the group's TTL, watchdog and max hold.
		confirmStart := time.Now()
		r, err := s.confirmGroup(ctx, m, req)
		var lost *GroupLostError
		switch {
		case err == nil:
			return s.multiGrant(m, r.fences, r.ttl, req.Watchdog, confirmStart), nil
		case errors.As(err, &lost): // the rest was given back
			held = 0
			if !time.Now().Before(deadline) {
				return giveUp(&HeldError{Lock: lost.Locks[0], RetryAfter: s.cfg.claimTTL})
			}
		case errors.Is(err, ErrUnavailable) && time.Now().Before(deadline) && s.ctx.Err() == nil && pause(ctx):
			// try the confirmation again
		default:
			return giveUp(err)
		}
	}
}
