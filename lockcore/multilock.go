package lockcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// A multi-lock takes several locks all or nothing under one lease (MultiLease): its members are
// ordinary locks, each held by the group's lease with a fence of its own, so single requests for
// a member wait in that member's line as usual.
//
// On one Redis every all-or-nothing step is one script over all members' keys (multi_*.lua),
// whatever their hash tags. Waiting takes the members one by one in name order instead (see
// lockInOrder): that order is what makes it deadlock-free, and each step there touches one lock.

// MultiRequest asks for several locks at once. Validation of its ranges is the caller's.
type MultiRequest struct {
	Locks    []string // 2 or more distinct names, in any order
	Mode     Mode     // for every member: Exclusive (the zero value) or Shared
	Owner    string
	TTL      time.Duration
	Wait     time.Duration // 0: try once
	Watchdog bool
	MaxHold  time.Duration // bounds a watchdog group: not renewed past MaxHold after its grant
	// Principal is the authenticated caller ("" without authentication), minted into the token.
	Principal string
	// HeldCap is as AcquireRequest's: Principal's own cap on its holds (0: the default; -1: none).
	HeldCap int
}

// MultiGrant is a held multi-lock as the caller should see it.
type MultiGrant struct {
	MultiLease
	Token     string
	Fences    []int64 // one per member, in MultiLease.Locks order (name order)
	TTL       time.Duration
	ExpiresAt time.Time // conservative: measured from before the Redis call
	Watchdog  bool
	waited    bool // it was granted member by member, after waiting (see lockInOrder)
}

// MultiReleased reports a released multi-lock.
type MultiReleased struct {
	MultiLease
}

// AcquireAll grants every lock of req to one new lease, or none. With req.Wait set it waits up to
// req.Wait, holding the members it has while it waits for the next one (see lockInOrder).
//
// It returns a *HeldError listing the members held (try-once) or the member it was waiting for
// (the wait ran out), and otherwise the errors Acquire returns. Whenever it returns an error the
// caller holds none of the members and is in no line; if ctx ends after the grant, the grant is
// given back before ctx's error is returned.
func (s *Service) AcquireAll(ctx context.Context, req MultiRequest) (MultiGrant, error) {
	if err := s.notOnRedLockFeature("multi-locks"); err != nil {
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
	m := MultiLease{ID: multiLeasePrefix + uuid.NewString(), Owner: req.Owner, Locks: names, Mode: req.Mode, Principal: req.Principal}
	counted := groupHeldMembers(m)
	if err := s.countHeld(ctx, m.Principal, req.HeldCap, heldSpan(req.TTL, req.Wait, req.Watchdog, req.MaxHold), counted...); err != nil {
		return MultiGrant{}, err
	}
	g, err := s.lockGroup(ctx, req, m)
	if err != nil && !grantUnknown(err, "") {
		s.uncountHeld(ctx, m.Principal, counted...)
	}
	return g, err
}

// lockGroup takes every member of m for req, or none (giving back what it took).
func (s *Service) lockGroup(ctx context.Context, req MultiRequest, m MultiLease) (MultiGrant, error) {
	start := time.Now()
	g, err := s.tryAll(ctx, req, m, start)
	var held *HeldError
	if req.Wait > 0 && (errors.As(err, &held) || errors.Is(err, ErrUnavailable)) {
		// Held, or Redis failing (a waiter rides that out; a try whose reply was lost is found
		// granted, since a lease that holds is never queued behind itself).
		g, err = s.lockInOrder(ctx, req, m, start)
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
		shard := s.shardOf(m.ID)
		err := s.run(context.WithoutCancel(ctx), s.watchdogSchedule, []string{shard.groups, shard.aged},
			[]string{"enroll", groupScheduleMember(m), ms(g.TTL / 3), agedGroupMember(m), strconv.FormatInt(slices.Min(g.Fences)/1000, 10)}).Error()
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
		reply, err := s.runGroup(ctx, s.multiAcquire, part, m.ID, ms(req.TTL), req.Owner, flag(req.Watchdog), ms(req.MaxHold), req.Mode.arg())
		if err != nil {
			return MultiGrant{}, err // the caller gives back the whole group when it can
		}
		r, err := ints(reply) // {1, fence...} | {0, ms, index...}
		if err != nil || len(r) < 1 || (r[0] == 1 && len(r) != len(part)+1) || (r[0] == 0 && len(r) < 3) {
			return MultiGrant{}, unexpectedReply("multi_acquire", part[0], r, err)
		}
		if r[0] == 0 {
			busy, err := members(part, r[2:])
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

// partitions splits sorted names into the sets one script can take: all of them on one Redis; on
// Redis Cluster those of each slot, the sets in the order of their first names.
func (s *Service) partitions(names []string) [][]string {
	if !s.cluster {
		return [][]string{names}
	}
	at := map[int]int{}
	var parts [][]string
	for _, name := range names {
		slot := keySlot(s.keys(LockRef(name)).lock)
		i, ok := at[slot]
		if !ok {
			i = len(parts)
			at[slot] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], name)
	}
	return parts
}

// inOrder lists the fences of names, in their order.
func inOrder(names []string, fences map[string]int64) []int64 {
	out := make([]int64, len(names))
	for i, name := range names {
		out[i] = fences[name]
	}
	return out
}

func (s *Service) multiGrant(m MultiLease, fences []int64, ttl time.Duration, watchdog bool, start time.Time) MultiGrant {
	return MultiGrant{MultiLease: m, Token: s.tokens.MintMulti(m), Fences: fences, TTL: ttl, ExpiresAt: start.Add(ttl),
		Watchdog: watchdog}
}

// members maps a script's 1-based member indexes to names.
func members(names []string, index []int64) ([]string, error) {
	out := make([]string, 0, len(index))
	for _, i := range index {
		if i < 1 || int(i) > len(names) {
			return nil, fmt.Errorf("member index %d out of range", i)
		}
		out = append(out, names[i-1])
	}
	return out, nil
}

// ReleaseAll gives back every member of the multi-lock token names (id, when not "", must be its
// id). It returns a *GroupLostError when some members were no longer held (the others are given
// back all the same), ErrInvalidToken for a bad token, and ErrUnavailable when Redis does not
// answer.
func (s *Service) ReleaseAll(ctx context.Context, token, id string) (MultiReleased, error) {
	if err := s.notOnRedLockFeature("multi-locks"); err != nil {
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
	s.uncountHeld(ctx, m.Principal, groupHeldMembers(m)...)
	if len(lost) > 0 {
		s.obs.Lost(kindMultiLock)
		return MultiReleased{}, &GroupLostError{ID: m.ID, Locks: lost}
	}
	s.obs.Released(kindMultiLock, m.Mode, -1)
	return MultiReleased{m}, nil
}

// releaseGroup gives back every member m still holds and returns those it no longer held (one
// script, or on Redis Cluster one per slot).
func (s *Service) releaseGroup(ctx context.Context, m MultiLease) (lost []string, err error) {
	watchdog := false
	for _, part := range s.partitions(m.Locks) {
		reply, err := s.runGroup(ctx, s.multiRelease, part, m.ID, m.Mode.arg())
		if err != nil {
			return nil, err
		}
		r, err := ints(reply) // {watchdog, index...}
		if err == nil && len(r) < 1 {
			err = errors.New("empty")
		}
		var gone []string
		if err == nil {
			gone, err = members(part, r[1:])
		}
		if err != nil {
			return nil, unexpectedReply("multi_release", part[0], r, err)
		}
		lost, watchdog = append(lost, gone...), watchdog || r[0] == 1
	}
	if watchdog {
		shard := s.shardOf(m.ID)
		if err := s.dropDuty(ctx, shard.groups, groupScheduleMember(m), shard.aged, agedGroupMember(m)); err != nil {
			s.log.Warn("taking a multi-lock off the watchdog schedule failed; the next sweep does it", "multilock", m.ID, "err", err)
		}
	}
	return lost, nil
}

// RenewAll sets the TTL of every member of the multi-lock token names to ttl (0: the group's TTL).
// If any member is no longer held it gives back the others and returns a *GroupLostError; it also
// returns ErrInvalidToken and ErrUnavailable as ReleaseAll does.
func (s *Service) RenewAll(ctx context.Context, token, id string, ttl time.Duration) (MultiGrant, error) {
	if err := s.notOnRedLockFeature("multi-locks"); err != nil {
		return MultiGrant{}, err
	}
	m, err := s.tokens.ParseMulti(token, id)
	if err != nil {
		return MultiGrant{}, err
	}
	start := time.Now()
	r, err := s.renewGroup(ctx, m, m.Locks, ttl, false)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) { // the members left were given back
			s.uncountHeld(ctx, m.Principal, groupHeldMembers(m)...)
		}
		s.observeRefusal(kindMultiLock, err)
		return MultiGrant{}, err
	}
	g := s.multiGrant(m, r.fences, r.ttl, r.watchdog, start)
	g.Token = token
	s.extendHeld(ctx, m.Principal, g.TTL+heldSlack, groupHeldMembers(m)...) // never shortened
	if g.Watchdog {
		err := s.run(context.WithoutCancel(ctx), s.watchdogSchedule, []string{s.shardOf(m.ID).groups},
			[]string{"reschedule", groupScheduleMember(m), ms(g.TTL / 3)}).Error()
		if err != nil {
			s.log.Warn("rescheduling a multi-lock's watchdog renewal failed", "multilock", m.ID, "err", err)
		}
	}
	return g, nil
}

// groupRenewal is multi_renew.lua's answer for a group that still holds every member.
type groupRenewal struct {
	ttl      time.Duration
	watchdog bool
	now      int64 // Redis time, ms
	fences   []int64
}

// errWatchdogDone: a watchdog renewal found the group past its max hold (or without a watchdog).
var errWatchdogDone = errors.New("watchdog duty over")

// renewGroup renews the members names (all of m's, or the first ones a waiting group holds) to ttl
// (0: the group's). It returns a *GroupLostError when some were no longer held (the rest are given
// back), and errWatchdogDone for a watchdog renewal the group is past.
func (s *Service) renewGroup(ctx context.Context, m MultiLease, names []string, ttl time.Duration, byWatchdog bool) (groupRenewal, error) {
	return s.runRenewGroup(ctx, m, names, ms(ttl), flag(byWatchdog), "", "0")
}

// confirmGroup is a waiting group's last step: every member renewed to req.TTL, with req's watchdog
// flag and its max hold counted from now (the members were taken one by one without them).
func (s *Service) confirmGroup(ctx context.Context, m MultiLease, req MultiRequest) (groupRenewal, error) {
	return s.runRenewGroup(ctx, m, m.Locks, ms(req.TTL), "0", flag(req.Watchdog), ms(req.MaxHold))
}

// runRenewGroup runs multi_renew.lua over names with its own arguments after the lease and mode:
// one script, or on Redis Cluster one per slot. When a step finds members gone (and gives back the
// rest of its slot), the members of every other slot are given back too: the group ends whole.
func (s *Service) runRenewGroup(ctx context.Context, m MultiLease, names []string, args ...string) (groupRenewal, error) {
	var out groupRenewal
	fences := make(map[string]int64, len(names))
	for _, part := range s.partitions(names) {
		reply, err := s.runGroup(ctx, s.multiRenew, part, append([]string{m.ID, m.Mode.arg()}, args...)...)
		if err != nil {
			return groupRenewal{}, err
		}
		r, err := ints(reply) // {1, ttl, watchdog, now, fence...} | {0, index...} | {-1}
		switch {
		case err != nil || len(r) < 1 || (r[0] == 1 && len(r) != len(part)+4):
			return groupRenewal{}, unexpectedReply("multi_renew", part[0], r, err)
		case r[0] == -1:
			return groupRenewal{}, errWatchdogDone
		case r[0] == 0:
			lost, err := members(part, r[1:])
			if err != nil {
				return groupRenewal{}, unexpectedReply("multi_renew", part[0], r, err)
			}
			if others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(part, n) }); len(others) > 0 {
				gone, err := s.releaseGroup(context.WithoutCancel(ctx), MultiLease{ID: m.ID, Locks: others, Mode: m.Mode})
				if err != nil {
					return groupRenewal{}, err
				}
				lost = append(lost, gone...)
				slices.Sort(lost)
			}
			return groupRenewal{}, &GroupLostError{ID: m.ID, Locks: lost}
		}
		out.ttl, out.watchdog = time.Duration(r[1])*time.Millisecond, r[2] == 1
		if out.now == 0 {
			out.now = r[3]
		}
		for k, name := range part {
			fences[name] = r[4+k]
		}
	}
	out.fences = inOrder(names, fences)
	return out, nil
}

// runGroup runs a multi_*.lua script over the keys of the locks names.
func (s *Service) runGroup(ctx context.Context, script *rueidis.Lua, names []string, args ...string) ([]rueidis.RedisMessage, error) {
	keys := make([]string, 0, 7*len(names))
	for _, name := range names {
		keys = append(keys, s.keys(LockRef(name)).all()...)
	}
	return s.exec(ctx, script, keys, s.scriptArgs(keys[0], KindLock, args))
}

// groupScheduleMember is m's entry in the multi-lock watchdog schedule: "<id>\n<x|s>\n<member>...".
func groupScheduleMember(m MultiLease) string {
	return m.ID + "\n" + m.Mode.arg() + "\n" + strings.Join(m.Locks, "\n")
}

// parseGroupScheduleMember reads groupScheduleMember's format back.
func parseGroupScheduleMember(member string) (MultiLease, bool) {
	parts := strings.Split(member, "\n")
	if len(parts) < 4 || (parts[1] != "x" && parts[1] != "s") {
		return MultiLease{}, false
	}
	m := MultiLease{ID: parts[0], Locks: parts[2:], Mode: Exclusive}
	if parts[1] == "s" {
		m.Mode = Shared
	}
	return m, true
}
