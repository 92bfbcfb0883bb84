package lockcore

import (
	"context"
	"errors"
	"time"
)

// lockInOrder is a waiting multi-lock's way in once its all-or-nothing try failed: it takes the
// members one by one in name order, each through the same wait as a single acquire (waitAs: FIFO
// in that member's line, direct hand-off), holding the members it already has while it waits for
// the next.
//
// No deadlock: every waiter, single or group, waits for one lock at a time, and a group holds only
// members that sort before the one it waits for. A chain of waits-for therefore climbs in name
// order (or, within one line, in arrival order) and cannot close into a cycle.
//
// The members it holds meanwhile are leased for req.TTL and renewed by this call every TTL/3 (it
// waits in slices that long, keeping its place with the queue ticket each slice ends with), so a
// replica that dies mid-wait frees them within one TTL. When the wait runs out or ctx ends it gives
// back what it took (and waitAs has left the line). If a held member is lost meanwhile (a Redis
// restart), it gives back the rest and starts over within the wait.
// minSlice bounds how often a waiting group renews what it holds: a group with a TTL under three
// times this may lose a member between renewals, and then starts over (safe, if slower), rather
// than spend Redis calls on renewals every few milliseconds.
const minSlice = 50 * time.Millisecond

func (s *Service) lockInOrder(ctx context.Context, req MultiRequest, m MultiLease, start time.Time) (MultiGrant, error) {
	deadline := start.Add(req.Wait)
	held := 0 // m.Locks[:held] are ours
	ticket := ""
	giveUp := func(err error) (MultiGrant, error) {
		if held > 0 {
			if _, rerr := s.releaseGroup(context.WithoutCancel(ctx), MultiLease{ID: m.ID, Locks: m.Locks[:held], Mode: m.Mode}); rerr != nil {
				// They run out within one TTL: nobody renews them any more.
				s.log.Warn("giving back the members a multi-lock took failed", "multilock", m.ID, "err", rerr)
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
				slice = min(slice, max(req.TTL/3, minSlice))
			}
			if slice <= 0 {
				return giveUp(&HeldError{Lock: m.Locks[held], RetryAfter: s.claimTTL})
			}
			member := AcquireRequest{Lock: m.Locks[held], Mode: req.Mode, Owner: req.Owner, TTL: req.TTL, Wait: slice,
				Watchdog: req.Watchdog, MaxHold: req.MaxHold, QueueTicket: ticket}
			_, err := s.waitAs(ctx, member, m.ID)
			var heldErr *HeldError
			switch {
			case err == nil:
				held, ticket = held+1, ""
			case errors.As(err, &heldErr) && held > 0 && time.Now().Before(deadline):
				// A slice ended: renew what we hold, then queue again at our place.
				ticket = heldErr.QueueTicket
				_, err := s.renewGroup(ctx, m, m.Locks[:held], req.TTL, false)
				var lost *GroupLostError
				if errors.As(err, &lost) { // the rest was given back: start over
					held, ticket = 0, ""
				}
			default:
				return giveUp(err)
			}
		}
		// Every member is ours: confirm them together, which also starts their TTL afresh.
		confirmStart := time.Now()
		r, err := s.renewGroup(ctx, m, m.Locks, req.TTL, false)
		var lost *GroupLostError
		switch {
		case err == nil:
			return s.multiGrant(m, r.fences, r.ttl, req.Watchdog, confirmStart), nil
		case errors.As(err, &lost): // the rest was given back
			held = 0
			if !time.Now().Before(deadline) {
				return giveUp(&HeldError{Lock: lost.Locks[0], RetryAfter: s.claimTTL})
			}
		default:
			return giveUp(err)
		}
	}
}
