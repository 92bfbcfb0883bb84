package lockcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// A multi-lock takes several locks all or nothing under one lease (MultiLease): its members are
// ordinary locks, each held by the group's lease with a fence of its own, so single requests for
// a member wait in that member's line as usual.
//
// On one Redis every all-or-nothing step is one script over all members' keys (multi_*.lua),
// whatever their hash tags. Waiting takes the members one by one in name order instead (see
// lockInOrder): that order is what makes it deadlock-free, and each step there touches one lock.

// AcquireAll grants every lock of req to one new lease, or none. With req.Wait set it waits up to
// req.Wait, holding the members it has while it waits for the next one (see lockInOrder).
//
// It returns a *HeldError listing the members held (try-once) or the member it was waiting for
// (the wait ran out, with a group queue ticket when it ran out in that member's line: see
// multilock_ticket.go), and otherwise the errors Acquire returns (ErrInvalidTicket for a ticket
// handed out for another set of locks, owner or principal, or a lock's). Whenever it returns an error the
// caller holds none of the members and is in no line; if ctx ends after the grant, the grant is
// given back before ctx's error is returned.
func (s *Service) AcquireAll(ctx context.Context, req MultiRequest) (MultiGrant, error) {
	if err := s.dep.offers(featureMultiLocks); err != nil {
		return MultiGrant{}, err
	}
	start := time.Now()
	g, err := s.acquireAll(ctx, req)
	if err != nil {
		s.observeRefusal(kindMultiLock, err)
		return g, err
	}
	if waited := time.Since(start); req.Wait > 0 && g.waited {
		s.obs.Granted(kindMultiLock, g.Mode, GrantHandOff, waited)
	} else {
		s.obs.Granted(kindMultiLock, g.Mode, GrantNew, 0)
	}
	return g, nil
}

func (s *Service) acquireAll(ctx context.Context, req MultiRequest) (MultiGrant, error) {
	names := slices.Clone(req.Locks)
	slices.Sort(names)
	if len(names) < 2 || len(slices.Compact(slices.Clone(names))) != len(names) {
		return MultiGrant{}, fmt.Errorf("%w: a multi-lock takes two or more distinct locks", ErrInvalid)
	}
	if req.Mode != Shared {
		req.Mode = Exclusive
	}
	for _, name := range names {
		if err := s.space.admits(LockRef(name), req.TTL); err != nil {
			return MultiGrant{}, err
		}
	}
	resume, err := s.redeemGroupTicket(ctx, req.QueueTicket, names, req.Owner, req.Principal)
	if err != nil {
		return MultiGrant{}, err
	}
	m := MultiLease{ID: cmp.Or(resume.group, multiLeasePrefix+uuid.NewString()), Owner: req.Owner, Locks: names, Mode: req.Mode, Principal: req.Principal}
	counted := groupHeldMembers(m)
	if err := s.ledgers.held.count(ctx, m.Principal, req.HeldCap, heldSpan(req.TTL, req.Wait, req.Watchdog, req.MaxHold), counted...); err != nil {
		return MultiGrant{}, err
	}
	g, err := s.lockGroup(ctx, req, m, resume)
	if err != nil && !grantUnknown(err, "") {
		s.ledgers.held.uncount(ctx, m.Principal, counted...)
	}
	return g, err
}

// lockGroup takes every member of m for req, or none (giving back what it took); a waiting group
// resumes the wait a group ticket kept (resume, zero for a newcomer).
func (s *Service) lockGroup(ctx context.Context, req MultiRequest, m MultiLease, resume groupResume) (MultiGrant, error) {
	start := time.Now()
	g, err := s.tryAll(ctx, req, m, start)
	var held *HeldError
	if req.Wait > 0 && (errors.As(err, &held) || errors.Is(err, ErrUnavailable)) {
		// Held, or Redis failing (a waiter rides that out; a try whose reply was lost is found
		// granted, since a lease that holds is never queued behind itself).
		g, err = s.lockInOrder(ctx, req, m, start, resume)
		g.waited = true
	}
	if err != nil {
		if req.Wait == 0 && errors.Is(err, ErrUnavailable) {
			// The try may have been applied, its reply lost: give back whatever it took (nothing
			// else holds this lease), so that nobody holds members nobody has the token of.
			_, _ = s.releaseGroup(context.WithoutCancel(ctx), m)
		}
		return MultiGrant{}, err
	}
	if g.Watchdog {
		shard := s.watchdog.shards.of(m.ID)
		err := s.do(context.WithoutCancel(ctx), scripts.watchdogSchedule, []string{shard.groups, shard.candidates},
			[]string{"enroll", groupScheduleMember(m), ms(g.TTL / 3), candidateGroupMember(m), strconv.FormatInt(slices.Min(g.Fences)/1000, 10)}).Error()
		if err != nil {
			s.releaseGroup(context.WithoutCancel(ctx), m) // a watchdog group nobody would renew is worse than none
			return MultiGrant{}, classify(err)
		}
	}
	if err := ctx.Err(); err != nil {
		_, _ = s.releaseGroup(context.WithoutCancel(ctx), m)
		return MultiGrant{}, err
	}
	return g, nil
}

// tryAll runs the all-or-nothing try (multi_acquire.lua): the grant, or a *HeldError listing the
// members held or waited for. On Redis Cluster it runs one step per slot (see partitions), giving
// back what earlier steps took when a later one finds a member held.
func (s *Service) tryAll(ctx context.Context, req MultiRequest, m MultiLease, start time.Time) (MultiGrant, error) {
	fences := make(map[string]int64, len(m.Locks))
	var taken []string
	for _, part := range s.partitions(m.Locks) {
		reply, err := s.runGroup(ctx, scripts.multiAcquire, part, m.ID, ms(req.TTL), req.Owner, flag(req.Watchdog), ms(req.MaxHold), req.Mode.arg())
		if err != nil {
			return MultiGrant{}, err // the caller gives back the whole group when it can
		}
		r, err := ints(reply) // {1, fence...} | {0, ms, index...}
		if err != nil || len(r) < 1 || (r[0] == 1 && len(r) != len(part)+1) || (r[0] == 0 && len(r) < 3) {
			return MultiGrant{}, unexpectedReply("multi_acquire", part[0], r, err)
		}
		if r[0] == 0 {
			busy, err := membersAt(part, r[2:])
			if err != nil {
				return MultiGrant{}, unexpectedReply("multi_acquire", part[0], r, err)
			}
			if len(taken) > 0 {
				if _, err := s.releaseGroup(context.WithoutCancel(ctx), MultiLease{ID: m.ID, Locks: taken, Mode: m.Mode}); err != nil {
					return MultiGrant{}, err
				}
			}
			return MultiGrant{}, &HeldError{Lock: busy[0], Locks: busy, RetryAfter: time.Duration(max(r[1], 0)) * time.Millisecond}
		}
		for k, name := range part {
			fences[name] = r[1+k]
		}
		taken = append(taken, part...)
	}
	return s.multiGrant(m, inOrder(m.Locks, fences), req.TTL, req.Watchdog, start), nil
}

// ReleaseAll gives back every member of the multi-lock token names (id, when not "", must be its
// id). It returns a *GroupLostError when some members were no longer held (the others are given
// back all the same), ErrInvalidToken for a bad token, and ErrUnavailable when Redis does not
// answer.
func (s *Service) ReleaseAll(ctx context.Context, token, id string) (MultiReleased, error) {
	if err := s.dep.offers(featureMultiLocks); err != nil {
		return MultiReleased{}, err
	}
	m, err := s.tokens.ParseMulti(token, id)
	if err != nil {
		return MultiReleased{}, err
	}
	lost, err := s.releaseGroup(ctx, m)
	if err != nil {
		return MultiReleased{}, err
	}
	s.ledgers.held.uncount(ctx, m.Principal, groupHeldMembers(m)...)
	if len(lost) > 0 {
		s.obs.Lost(kindMultiLock)
		return MultiReleased{}, s.groupLost(ctx, m.ID, lost)
	}
	s.obs.HoldReleased(kindMultiLock, m.Mode, -1)
	return MultiReleased{m}, nil
}

// RenewAll sets the TTL of every member of the multi-lock token names to ttl (0: the group's TTL).
// If any member is no longer held it gives back the others and returns a *GroupLostError; it also
// returns ErrInvalidToken and ErrUnavailable as ReleaseAll does.
func (s *Service) RenewAll(ctx context.Context, token, id string, ttl time.Duration) (MultiGrant, error) {
	if err := s.dep.offers(featureMultiLocks); err != nil {
		return MultiGrant{}, err
	}
	m, err := s.tokens.ParseMulti(token, id)
	if err != nil {
		return MultiGrant{}, err
	}
	for _, name := range m.Locks {
		if err := s.space.admits(LockRef(name), ttl); err != nil {
			return MultiGrant{}, err
		}
	}
	start := time.Now()
	r, err := s.renewGroup(ctx, m, m.Locks, ttl, false)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) { // the members left were given back
			s.ledgers.held.uncount(ctx, m.Principal, groupHeldMembers(m)...)
		}
		s.observeRefusal(kindMultiLock, err)
		return MultiGrant{}, err
	}
	g := s.multiGrant(m, r.fences, r.ttl, r.watchdog, start)
	g.Token = token
	s.ledgers.held.extend(ctx, m.Principal, g.TTL+heldSlack, groupHeldMembers(m)...) // never shortened
	if g.Watchdog {
		err := s.do(context.WithoutCancel(ctx), scripts.watchdogSchedule, []string{s.watchdog.shards.of(m.ID).groups},
			[]string{"reschedule", groupScheduleMember(m), ms(g.TTL / 3)}).Error()
		if err != nil {
			s.log.Warn("rescheduling a multi-lock's watchdog renewal failed", "multilock", m.ID, "err", err)
		}
	}
	return g, nil
}

// renewGroupDue renews every member of the multi-lock a group schedule member names; it returns as
// renewDue does.
func (s *Service) renewGroupDue(ctx context.Context, member string) int64 {
	m, ok := parseGroupScheduleMember(member)
	if !ok {
		return 0
	}
	r, err := s.renewGroup(ctx, m, m.Locks, 0, true)
	var lost *GroupLostError
	switch {
	case errors.Is(err, errWatchdogDone):
		s.obs.WatchdogRenewal("ended")
		return 0
	case errors.As(err, &lost):
		outcome := "ended"
		if len(lost.Locks) < len(m.Locks) { // all gone: released as the sweep ran, or ran out whole
			outcome = "lost"
			s.log.Warn("watchdog found a multi-lock's member gone; the group's other members were given back", "multilock", m.ID, "lost", lost.Locks)
		}
		s.obs.WatchdogRenewal(outcome)
		return 0
	case err != nil:
		s.watchdog.failed(ctx, err, "multilock", m.ID)
		return -1
	}
	s.obs.WatchdogRenewal("renewed")
	return r.now + r.ttl.Milliseconds()/3
}
