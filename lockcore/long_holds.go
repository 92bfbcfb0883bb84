package lockcore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Long holds: a hold alive longer than Options.LongHold (a forgotten watchdog, a hung holder) is
// counted, reported to Options.OnLongHoldSweep and logged once. Every replica sweeps, and a sweep
// costs Redis O(log n) in the common case, whatever the number of holds: it asks one zset per
// schedule shard for entries older than LongHold, and there are none.
//
// That zset ("aged", per shard, member -> grant time in ms of Redis time) holds only the holds that
// may live past LongHold; ordinary short leases never touch it. A hold alive at age LongHold had,
// at its grant or at one of its renewals, age + TTL >= LongHold, so it is entered then:
//   - a watchdog lease (or multi-lock) when it is enrolled, in the same script call (the
//     watchdog may renew it up to its max hold), and taken out when it is released;
//   - any other lease whose grant TTL is at least LongHold, or that is renewed at an age where age
//     + TTL >= LongHold (one extra ZADD, for such leases only).
// Entries whose hold ended without a release leave when the sweep finds them past LongHold and
// no longer held. A hold's age comes from its fence: the Redis time in µs of its grant.

// agedMember is a single lease's member of the aged zset: "l\n" + its schedule member.
func agedMember(l Lease) string { return "l\n" + scheduleMember(l) }

// agedGroupMember is a multi-lock's: "g\n" + its schedule member.
func agedGroupMember(m MultiLease) string { return "g\n" + groupScheduleMember(m) }

// trackAged enters l, granted at fence, into the aged zset: a hold that may outlive LongHold. A
// failure costs only the long-hold report of that lease.
func (s *Service) trackAged(ctx context.Context, l Lease) {
	if s.rl != nil {
		return // no long-hold report on RedLock (see redlock.go)
	}
	err := s.client.Do(context.WithoutCancel(ctx), s.client.B().Zadd().Key(s.shardOf(l.Lock).aged).Nx().
		ScoreMember().ScoreMember(float64(l.Fence/1000), agedMember(l)).Build()).Error()
	if err != nil {
		s.log.Warn("tracking a long lease for the long-hold report failed", l.Kind.String(), l.Lock, "err", err)
	}
}

// mayOutlive says whether a hold of l with ttl from now may still be alive at age LongHold.
func (s *Service) mayOutlive(l Lease, ttl time.Duration) bool {
	return heldSince(l.Fence, time.Now())+ttl >= s.longHold
}

// LongHold is one hold older than Options.LongHold.
type LongHold struct {
	Ref       Ref
	Owner     string
	Fence     int64
	Age       time.Duration
	Multilock string // the multi-lock id, for a multi-lock's member
}

// longHoldSweep looks for long holds every longHold/4 (at most every 10 s) until the Service
// closes, reporting each sweep's count and oldest age.
func (s *Service) longHoldSweep() {
	defer s.wg.Done()
	every := min(max(s.longHold/4, 100*time.Millisecond), 10*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	logged := map[string]bool{} // long holds this replica saw logged
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		if s.rl != nil { // no long-hold report on RedLock: only whether a quorum answers
			s.onRedisCheck(s.Ping(s.ctx) == nil)
			continue
		}
		holds, err := s.LongHolds(s.ctx, 1000)
		if s.ctx.Err() != nil {
			return
		}
		s.onRedisCheck(err == nil)
		if err != nil {
			continue
		}
		oldest := time.Duration(0)
		seen := map[string]bool{}
		for _, h := range holds {
			oldest = max(oldest, h.Age)
			marker := s.keys(h.Ref).lock + ":longhold:" + strconv.FormatInt(h.Fence, 10)
			seen[marker] = true
			if !logged[marker] && s.firstToLog(marker) {
				s.log.Warn("lock held longer than LEASEGATE_LONG_HOLD", h.Ref.Kind.String(), h.Ref.Name, "owner", h.Owner,
					"fence", h.Fence, "age_s", h.Age.Seconds(), "multilock", h.Multilock)
			}
		}
		logged = seen
		s.onLongHoldSweep(len(holds), oldest)
	}
}

// firstToLog says whether this replica is the first to see the long hold marker names (a key
// under the lock's hash tag, kept a day), so that one line is logged per long hold, not one per
// replica. When Redis does not answer, it logs.
func (s *Service) firstToLog(marker string) bool {
	err := s.client.Do(s.ctx, s.client.B().Set().Key(marker).Value("1").Nx().Px(24*time.Hour).Build()).Error()
	return !rueidis.IsRedisNil(err)
}

// LongHolds returns up to limit holds older than Options.LongHold, oldest first, and takes the
// entries of holds that ended out of the aged zset.
func (s *Service) LongHolds(ctx context.Context, limit int) ([]LongHold, error) {
	return s.oldestHolds(ctx, s.longHold, limit)
}

// LongestHeld returns up to limit of the oldest holds that may outlive Options.LongHold (watchdog
// leases and multi-locks, long TTLs, leases renewed late in life; see the top of this file),
// whatever their age, oldest first.
func (s *Service) LongestHeld(ctx context.Context, limit int) ([]LongHold, error) {
	return s.oldestHolds(ctx, 0, limit)
}

func (s *Service) oldestHolds(ctx context.Context, minAge time.Duration, limit int) ([]LongHold, error) {
	var out []LongHold
	if s.rl != nil {
		return out, nil // not tracked on RedLock (see redlock.go)
	}
	for _, shard := range s.shards {
		found, err := s.agedBefore(ctx, shard.aged, minAge, limit)
		if err != nil {
			return nil, err
		}
		for _, e := range found {
			holds, err := s.stillHeld(ctx, e)
			if err != nil {
				return nil, err
			}
			if len(holds) == 0 {
				_ = s.client.Do(ctx, s.client.B().Zrem().Key(shard.aged).Member(e.Member).Build()).Error()
			}
			out = append(out, holds...)
		}
	}
	slices.SortFunc(out, func(a, b LongHold) int { return int(b.Age - a.Age) })
	return out[:min(len(out), limit)], nil
}

// agedBefore returns up to limit entries of the aged zset key granted at least age ago (Redis
// time), oldest first.
func (s *Service) agedBefore(ctx context.Context, key string, age time.Duration, limit int) ([]rueidis.ZScore, error) {
	r, err := s.run(ctx, s.agedScript, []string{key}, []string{ms(age), strconv.Itoa(limit)}).ToArray()
	if err != nil {
		return nil, classify(err)
	}
	if len(r) == 0 {
		return nil, nil
	}
	now, err := r[0].AsInt64()
	if err != nil {
		return nil, unexpectedReply("aged", "", r, err)
	}
	var out []rueidis.ZScore
	for i := 1; i+1 < len(r); i += 2 {
		member, err1 := r[i].ToString()
		score, err2 := r[i+1].AsInt64()
		if err1 != nil || err2 != nil {
			return nil, unexpectedReply("aged", "", r, err1)
		}
		// The score is the grant's Redis time in ms; Score carries its age in ms.
		out = append(out, rueidis.ZScore{Member: member, Score: float64(now - score)})
	}
	return out, nil
}

// stillHeld inspects the hold an aged entry names: the long holds it still is (none when it
// ended).
func (s *Service) stillHeld(ctx context.Context, e rueidis.ZScore) ([]LongHold, error) {
	kind, rest, _ := strings.Cut(e.Member, "\n")
	parts := strings.Split(rest, "\n")
	var ref Ref
	var lease, group string
	switch {
	case kind == "l" && len(parts) >= 2:
		ref, lease = LockRef(parts[0]), parts[1]
		if len(parts) == 3 && parts[2] == "s" {
			ref.Kind = KindSemaphore
		}
	case kind == "g":
		m, ok := parseGroupScheduleMember(rest)
		if !ok {
			return nil, nil
		}
		ref, lease, group = LockRef(m.Locks[0]), m.ID, m.ID
	default:
		return nil, nil
	}
	st, err := s.Inspect(ctx, ref, "")
	if err != nil {
		return nil, err
	}
	age := time.Duration(e.Score) * time.Millisecond
	var out []LongHold
	for _, h := range st.holders() {
		if h.Lease == lease {
			out = append(out, LongHold{Ref: ref, Owner: h.Owner, Fence: h.Fence, Age: age, Multilock: group})
		}
	}
	return out, nil
}
