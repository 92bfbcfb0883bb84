package lockcore

import (
	"context"
	"slices"
	"strconv"
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
//   - a watchdog lease when it is enrolled (in the same script call) if its TTL reaches that far
//     already, else by the first renewal after which age + TTL >= LongHold (one extra ZADD NX per
//     renewal from then on); a multi-lock when it is enrolled (the watchdog may renew it up to its
//     max hold); both taken out when they are released;
//   - any other lease whose grant TTL is at least LongHold, or that is renewed at an age where age
//     + TTL >= LongHold (one extra ZADD, for such leases only).
// Entries whose hold ended without a release leave when the sweep finds them past LongHold and
// no longer held. A hold's age comes from its fence: the Redis time in µs of its grant.

// longHolds is the long-hold report: its threshold, where its candidates are, and whom it tells.
type longHolds struct {
	e            *engine
	shards       scheduleShards // each with its long-hold candidates (the aged zset)
	inspect      inspector      // reads the lock a candidate names (the Service)
	threshold    time.Duration  // Options.LongHold
	onSweep      func(n int, oldest time.Duration)
	onRedisCheck func(up bool)
}

// inspector reads a lock's state (Service.Inspect).
type inspector interface {
	Inspect(ctx context.Context, ref Ref, token string) (State, error)
}

func newLongHolds(e *engine, shards scheduleShards, inspect inspector, opts Options) *longHolds {
	return &longHolds{e: e, shards: shards, inspect: inspect, threshold: opts.LongHold, onSweep: opts.OnLongHoldSweep,
		onRedisCheck: opts.OnRedisCheck}
}

// reaches reports whether a hold of l, granted at its fence, with ttl from now may still be alive
// at age LongHold (false when the report is off: lh is nil).
func (lh *longHolds) reaches(l Lease, ttl time.Duration) bool {
	return lh != nil && heldSince(l.Fence, time.Now())+ttl >= lh.threshold
}

// track enters l into the aged zset if it reaches LongHold (a watchdog lease that does so at its
// grant is entered when it is enrolled, else by the renewal that makes it reach). A failure costs
// only the long-hold report of that lease.
func (lh *longHolds) track(ctx context.Context, l Lease, ttl time.Duration) {
	if !lh.reaches(l, ttl) {
		return
	}
	c := lh.e.dep.copies()[0]
	err := c.Do(context.WithoutCancel(ctx), c.B().Zadd().Key(lh.shards.of(l.Lock).candidates).Nx().
		ScoreMember().ScoreMember(float64(l.Fence/1000), candidateMember(l)).Build()).Error()
	if err != nil {
		lh.e.log.Warn("tracking a long lease for the long-hold report failed", l.Kind.String(), l.Lock, "err", err)
	}
}

// OldHold is one hold older than Options.LongHold.
type OldHold struct {
	Ref       Ref
	Owner     string
	Fence     int64
	Age       time.Duration
	Multilock string // the multi-lock id, for a multi-lock's member
}

// longHoldSweepEvery is how often the long holds are looked for: every LongHold/4, at most every
// 10 s.
func longHoldSweepEvery(longHold time.Duration) time.Duration {
	return min(max(longHold/4, 100*time.Millisecond), 10*time.Second)
}

// pingSweep is the long-hold sweep of a deployment without the report (RedLock): it only reports
// whether Redis answers (ping), until ctx ends.
func pingSweep(ctx context.Context, ping func(context.Context) error, opts Options) {
	tick := time.NewTicker(longHoldSweepEvery(opts.LongHold))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		opts.OnRedisCheck(ping(ctx) == nil)
	}
}

// sweep looks for long holds until the Service closes, reporting each sweep's count and oldest
// age, and whether Redis answered.
func (lh *longHolds) sweep() {
	e := lh.e
	tick := time.NewTicker(longHoldSweepEvery(lh.threshold))
	defer tick.Stop()
	logged := map[string]bool{} // long holds this replica saw logged
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		holds, err := lh.olderThan(e.ctx, lh.threshold, 1000)
		if e.ctx.Err() != nil {
			return
		}
		lh.onRedisCheck(err == nil)
		if err != nil {
			continue
		}
		oldest := time.Duration(0)
		seen := map[string]bool{}
		for _, h := range holds {
			oldest = max(oldest, h.Age)
			marker := e.keys(h.Ref).lock + ":longhold:" + strconv.FormatInt(h.Fence, 10)
			seen[marker] = true
			if !logged[marker] && lh.firstToLog(marker) {
				attrs := []any{h.Ref.Kind.String(), h.Ref.Name, "owner", h.Owner, "fence", h.Fence, "age_s", h.Age.Seconds()}
				if h.Multilock != "" { // a multi-lock's member: the group it belongs to
					attrs = append(attrs, "multilock", h.Multilock)
				}
				e.log.Warn("lock held longer than LEASEGATE_LONG_HOLD", attrs...) // the message stays: alerts and greps match it
			}
		}
		logged = seen
		lh.onSweep(len(holds), oldest)
	}
}

// firstToLog says whether this replica is the first to see the long hold marker names (a key
// under the lock's hash tag, kept a day), so that one line is logged per long hold, not one per
// replica. When Redis does not answer, it logs.
func (lh *longHolds) firstToLog(marker string) bool {
	c := lh.e.dep.copies()[0]
	err := c.Do(lh.e.ctx, c.B().Set().Key(marker).Value("1").Nx().Px(24*time.Hour).Build()).Error()
	return !rueidis.IsRedisNil(err)
}

// olderThan returns up to limit holds at least minAge old, oldest first, and takes the entries of
// holds that ended out of the aged zset.
func (lh *longHolds) olderThan(ctx context.Context, minAge time.Duration, limit int) ([]OldHold, error) {
	var out []OldHold
	c := lh.e.dep.copies()[0]
	for _, shard := range lh.shards {
		found, err := lh.candidatesBefore(ctx, shard.candidates, minAge, limit)
		if err != nil {
			return nil, err
		}
		for _, e := range found {
			holds, err := lh.stillHeld(ctx, e)
			if err != nil {
				return nil, err
			}
			if len(holds) == 0 {
				_ = c.Do(ctx, c.B().Zrem().Key(shard.candidates).Member(e.Member).Build()).Error()
			}
			out = append(out, holds...)
		}
	}
	slices.SortFunc(out, func(a, b OldHold) int { return int(b.Age - a.Age) })
	return out[:min(len(out), limit)], nil
}

// candidatesBefore returns up to limit entries of the aged zset key granted at least age ago (Redis
// time), oldest first.
func (lh *longHolds) candidatesBefore(ctx context.Context, key string, age time.Duration, limit int) ([]rueidis.ZScore, error) {
	r, err := lh.e.do(ctx, scripts.aged, []string{key}, []string{ms(age), strconv.Itoa(limit)}).ToArray()
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
func (lh *longHolds) stillHeld(ctx context.Context, e rueidis.ZScore) ([]OldHold, error) {
	ref, lease, group, ok := parseCandidateMember(e.Member)
	if !ok {
		return nil, nil
	}
	st, err := lh.inspect.Inspect(ctx, ref, "")
	if err != nil {
		return nil, err
	}
	age := time.Duration(e.Score) * time.Millisecond
	var out []OldHold
	for _, h := range st.holders() {
		if h.Lease == lease {
			out = append(out, OldHold{Ref: ref, Owner: h.Owner, Fence: h.Fence, Age: age, Multilock: group})
		}
	}
	return out, nil
}
