package lockcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/rueidis"
)

// A multi-lock's group: its requests and grants, and the scripts that take, renew and give back
// all of its members at once (multi_*.lua), slot by slot on a Redis Cluster.

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
	// QueueTicket, from the *HeldError that ended an earlier wait for the same locks, resumes that
	// wait: the same group id, the start of its wait, and its place in the line it waited in (see
	// multilock_ticket.go).
	QueueTicket string
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

// partitions splits sorted names into the sets one script can take, those of one slot (see
// deployment.slot: all of them on one Redis), the sets in the order of their first names.
func (s *Service) partitions(names []string) [][]string {
	at := map[int]int{}
	var parts [][]string
	for _, name := range names {
		slot := s.dep.slot(s.keys(LockRef(name)).lock)
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

// membersAt maps a script's 1-based member indexes to names.
func membersAt(names []string, index []int64) ([]string, error) {
	out := make([]string, 0, len(index))
	for _, i := range index {
		if i < 1 || int(i) > len(names) {
			return nil, fmt.Errorf("member index %d out of range", i)
		}
		out = append(out, names[i-1])
	}
	return out, nil
}

// releaseGroup gives back every member m still holds and returns those it no longer held (one
// script, or on Redis Cluster one per slot).
func (s *Service) releaseGroup(ctx context.Context, m MultiLease) (lost []string, err error) {
	watchdog := false
	for _, part := range s.partitions(m.Locks) {
		reply, err := s.runGroup(ctx, scripts.multiRelease, part, m.ID, m.Mode.arg())
		if err != nil {
			return nil, err
		}
		r, err := ints(reply) // {watchdog, index...}
		if err == nil && len(r) < 1 {
			err = errors.New("empty")
		}
		var gone []string
		if err == nil {
			gone, err = membersAt(part, r[1:])
		}
		if err != nil {
			return nil, unexpectedReply("multi_release", part[0], r, err)
		}
		lost, watchdog = append(lost, gone...), watchdog || r[0] == 1
	}
	if watchdog {
		shard := s.watchdog.shards.of(m.ID)
		if err := s.watchdog.unlist(ctx, shard.groups, groupScheduleMember(m), shard.candidates, candidateGroupMember(m)); err != nil {
			s.log.Warn("taking a multi-lock off the watchdog schedule failed; the next sweep does it", "multilock", m.ID, "err", err)
		}
	}
	return lost, nil
}

// groupRenewal is multi_renew.lua's answer for a group that still holds every member.
type groupRenewal struct {
	ttl      time.Duration
	watchdog bool
	now      int64 // Redis time, ms
	fences   []int64
}

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
		reply, err := s.runGroup(ctx, scripts.multiRenew, part, append([]string{m.ID, m.Mode.arg()}, args...)...)
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
			lost, err := membersAt(part, r[1:])
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
			return groupRenewal{}, s.groupLost(ctx, m.ID, lost)
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
func (s *Service) runGroup(ctx context.Context, sc *script, names []string, args ...string) ([]rueidis.RedisMessage, error) {
	lc := s.lockCall(LockRef(names[0])) // the first's common ARGV serves all (one slot) but its kind
	keys := make([]string, 0, 8*len(names))
	refs := make([]Ref, len(names))
	for i, name := range names {
		refs[i] = LockRef(name)
		keys = append(keys, s.keys(refs[i]).all()...)
	}
	common := slices.Clone(lc.common)
	common[len(common)-1] = s.space.kindArg(refs...)
	return s.dep.run(ctx, call{script: sc, keys: keys, args: append(common, args...)})
}

// errWatchdogDone: a watchdog renewal found the group past its max hold (or without a watchdog).
var errWatchdogDone = errors.New("watchdog duty over")
