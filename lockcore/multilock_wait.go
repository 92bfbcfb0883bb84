package lockcore

import (
	"context"
	"errors"
	"slices"
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
//
// A wait that runs out in a member's line, or that the replica's shutdown ends there, hands out a
// group queue ticket (multilock_ticket.go)
// wrapping that member's own; a group resuming with one (resume) has its id already, and presents
// the member's ticket when it comes to that member again, having taken the members before it in
// order, as any group does: the order, and so the argument above, is the same. Nothing is held
// between two requests: the members taken are given back when each one ends.
func (s *Service) lockInOrder(ctx context.Context, req MultiRequest, m MultiLease, start time.Time, resume groupResume) (MultiGrant, error) {
	deadline := start.Add(req.Wait)
	since := start // the start of the group's wait, for how long it waited
	if resume.group != "" {
		since = resume.since
	}
	hold := max(req.TTL, minWaitHold)
	held := 0 // m.Locks[:held] are ours
	ticket := ""
	// clean: every member's wait so far left its line without a Redis call of it still on its
	// way (see HeldError.QueueTicket), which could give back, after this answer, what a group
	// resuming with this id was granted meanwhile. Only a clean wait hands out a group ticket.
	clean := true
	giveUp := func(err error) (MultiGrant, error) {
		if held > 0 {
			if _, rerr := s.releaseGroup(context.WithoutCancel(ctx), MultiLease{ID: m.ID, Locks: m.Locks[:held], Mode: m.Mode}); rerr != nil {
				s.log.Warn("giving back the members a waiting multi-lock took failed; they run out within their lease", "multilock", m.ID, "lease", hold, "err", rerr)
				return MultiGrant{}, rerr
			}
		}
		// A member's queue ticket goes back to the client only inside the group's own.
		var (
			heldErr     *HeldError
			shutdownErr *ShutdownError
		)
		switch {
		case errors.As(err, &heldErr):
			memberTicket := heldErr.QueueTicket
			heldErr.Locks, heldErr.Waited, heldErr.QueueTicket = []string{heldErr.Lock}, time.Since(since), ""
			if member := slices.Index(m.Locks, heldErr.Lock); memberTicket != "" && clean && member >= 0 && ctx.Err() == nil {
				heldErr.QueueTicket = s.handOutGroupTicket(ctx, m, since, member, memberTicket)
			}
		case errors.As(err, &shutdownErr):
			// The replica closes: a group that waited in a member's line (m.Locks[held]) resumes
			// there on another replica with a group ticket, as a single waiter does with its own.
			memberTicket := shutdownErr.QueueTicket
			err = errShuttingDown
			if memberTicket != "" && clean && held < len(m.Locks) {
				if t := s.handOutGroupTicket(ctx, m, since, held, memberTicket); t != "" {
					err = &ShutdownError{QueueTicket: t}
				}
			}
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
			if held == resume.member && resume.memberTicket != "" { // back at the line it waited in
				ticket, resume.memberTicket = resume.memberTicket, "" // taken once
			}
			member := AcquireRequest{Lock: m.Locks[held], Mode: req.Mode, Owner: req.Owner, TTL: hold, Wait: slice,
				QueueTicket: ticket, Principal: req.Principal}
			_, err := s.waitAs(ctx, member, m.ID)
			var (
				heldErr *HeldError
				shutErr *ShutdownError
			)
			ticketed := (errors.As(err, &heldErr) && heldErr.QueueTicket != "") ||
				(errors.As(err, &shutErr) && shutErr.QueueTicket != "") // it left its line, keeping its place
			if err != nil && !ticketed {
				clean = false
			}
			switch {
			case err == nil:
				held, ticket = held+1, ""
				continue
			case held == 0 || ctx.Err() != nil || !time.Now().Before(deadline):
				return giveUp(err)
			case heldErr != nil: // a slice ended: queue again at our place after renewing
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
