package lockcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// The watchdog's schedule lives in Redis, not in the process that granted the lease: a zset maps
// "<lock>\n<lease>" (a semaphore's: "<semaphore>\n<lease>\ns") to when its next renewal is due, in Redis time (so gateway clocks play no
// part). Every replica sweeps it, so a watchdog lease outlives the replica that granted it;
// renewal is idempotent, and a claim pushes due entries a little forward so that replicas rarely
// renew the same lease twice.
//
// On Redis Cluster one schedule would put every lease's renewals on one node: the schedule is
// split into watchdogShards shards, each a pair of zsets under a hash tag of its own ("0" to "7",
// slots spread over the masters), a lease going to the shard its lock's name hashes to.
const watchdogShards = 8

// scheduleShard is one shard of the schedule: single leases' renewals and multi-locks', and the
// holds that may outlive the long-hold threshold (see long_holds.go).
type scheduleShard struct{ leases, groups, aged string }

func scheduleShards(prefix string, cluster bool) []scheduleShard {
	if !cluster {
		return []scheduleShard{{prefix + "watchdog", prefix + "watchdog:multi", prefix + "holds:aged"}}
	}
	shards := make([]scheduleShard, watchdogShards)
	for i := range shards {
		base := prefix + "watchdog:{" + strconv.Itoa(i) + "}"
		shards[i] = scheduleShard{base, base + ":multi", base + ":aged"}
	}
	return shards
}

// shardOf returns the schedule shard of the lock (or multi-lock id) name.
func (s *Service) shardOf(name string) scheduleShard {
	if len(s.shards) == 1 {
		return s.shards[0]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return s.shards[h.Sum32()%uint32(len(s.shards))]
}

const (
	sweepEvery = 100 * time.Millisecond // how often a replica looks for due renewals
	claimHold  = 250 * time.Millisecond // a claimed renewal is retried after this if it fails
	sweepBatch = 256                    // renewals claimed per round trip
)

// enroll schedules the first renewal of a new watchdog grant, a third of its TTL from now.
func (s *Service) enroll(ctx context.Context, g Grant) error {
	shard := s.shardOf(g.Lock)
	keys := []string{shard.leases, shard.aged}
	if s.rl != nil {
		keys = keys[:1] // no long-hold report on RedLock: nothing would sweep the aged entries
	}
	return s.runSchedule(ctx, keys,
		"enroll", scheduleMember(g.Lease), ms(g.TTL/3), agedMember(g.Lease), strconv.FormatInt(g.Fence/1000, 10))
}

// runSchedule runs watchdog_schedule.lua (not 'claim'): on RedLock, on every master, a majority
// of which must take it (each master keeps a copy of the schedule, so that losing a minority of
// them loses no renewal).
func (s *Service) runSchedule(ctx context.Context, keys []string, args ...string) error {
	ctx = context.WithoutCancel(ctx)
	if s.rl == nil {
		return classify(s.run(ctx, s.watchdogSchedule, keys, args).Error())
	}
	f := s.rl.send(ctx, s.watchdogSchedule, keys, args)
	took := func(r masterReply) bool { return r.res.Error() == nil }
	got := f.collect(time.Time{}, s.rl.until(took))
	f.rest(nil)
	if count(got, took) < s.rl.quorum {
		return fmt.Errorf("%w: fewer than a majority of RedLock masters took the watchdog schedule", ErrUnavailable)
	}
	return nil
}

// reschedule sets a watchdog lease's next renewal to a third of its new TTL from now, after a
// renewal or re-entry that may have shortened it (a renewal due at the old TTL's third would come
// too late). A failure is logged: the lease then keeps its old schedule.
func (s *Service) reschedule(ctx context.Context, g Grant) {
	err := s.runSchedule(ctx, []string{s.shardOf(g.Lock).leases}, "reschedule", scheduleMember(g.Lease), ms(g.TTL/3))
	if err != nil {
		s.log.Warn("rescheduling a watchdog renewal failed", g.Kind.String(), g.Lock, "err", err)
	}
}

// unschedule takes a released lease off the watchdog schedule and the aged holds. A failure is
// harmless: the next sweeps find the lease gone and drop it then.
func (s *Service) unschedule(ctx context.Context, l Lease) {
	shard := s.shardOf(l.Lock)
	if err := s.dropDuty(ctx, shard.leases, scheduleMember(l), shard.aged, agedMember(l)); err != nil {
		s.log.Warn("taking a lease off the watchdog schedule failed; the next sweep does it", l.Kind.String(), l.Lock, "err", err)
	}
}

// dropDuty takes member off the watchdog schedule key and aged off the shard's aged holds (see
// long_holds.go).
func (s *Service) dropDuty(ctx context.Context, schedule, member, agedKey, aged string) error {
	var err error
	for _, c := range s.clients() {
		// One call each, not one DoMulti: a Cluster client's DoMulti has panicked on redirects
		// (see replica_acks.go). A watchdog lease's release costs a round trip more.
		for _, cmd := range []rueidis.Completed{c.B().Zrem().Key(schedule).Member(member).Build(), c.B().Zrem().Key(agedKey).Member(aged).Build()} {
			err = cmp.Or(err, c.Do(context.WithoutCancel(ctx), cmd).Error())
		}
	}
	return err
}

func scheduleMember(l Lease) string {
	if l.Kind == KindSemaphore {
		return l.Lock + "\n" + l.ID + "\ns"
	}
	return l.Lock + "\n" + l.ID
}

// sweep renews due watchdog leases until the Service closes.
func (s *Service) sweep() {
	defer s.wg.Done()
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		for _, c := range s.sweepClients() {
			for _, shard := range s.shards {
				due := s.anyDue(s.ctx, c, shard)
				for due[0] && s.ctx.Err() == nil && s.sweepOnce(c, shard.leases, s.renewDue) == sweepBatch {
				}
				for due[1] && s.ctx.Err() == nil && s.sweepOnce(c, shard.groups, s.renewGroupDue) == sweepBatch {
				}
			}
		}
	}
}

// sweepClients are the clients whose schedule the sweep reads: the one, or on RedLock each
// master's copy in turn, skipping those that do not count now (down, or restarted: their copy may
// be empty, and the others have it).
func (s *Service) sweepClients() []rueidis.Client {
	if s.rl == nil {
		return []rueidis.Client{s.client}
	}
	var out []rueidis.Client
	now := time.Now()
	for _, m := range s.rl.masters {
		if m.counts(now) {
			out = append(out, m.client)
		}
	}
	return out
}

// sweepOnce claims a batch of due renewals from schedule, renews them concurrently with renew
// (rueidis pipelines the calls) and records the outcome in one script. It returns how many it
// claimed.
func (s *Service) sweepOnce(c rueidis.Client, schedule string, renew func(context.Context, string) int64) int {
	ctx := s.ctx
	claimed, err := s.runOn(ctx, c, s.watchdogSchedule, []string{schedule},
		[]string{"claim", ms(claimHold), strconv.Itoa(sweepBatch)}).AsStrSlice()
	if err == nil && len(claimed) == 0 {
		err = unexpectedReply("watchdog claim", "", claimed, nil)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("watchdog sweep failed; retrying", "err", err)
		}
		return 0
	}
	later, due := claimed[0], claimed[1:]
	s.obs.WatchdogSwept(len(due))
	next := make([]int64, len(due)) // > 0: renewed, next due then; 0: done; < 0: failed, retry after claimHold
	var wg sync.WaitGroup
	for i, member := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next[i] = renew(ctx, member)
		}()
	}
	wg.Wait()

	// The outcome goes back in one script, which keeps a renewal a renew or re-entry brought
	// forward meanwhile (see reschedule) rather than overwrite it.
	args := []string{"settle", later}
	for i, member := range due {
		if next[i] >= 0 {
			args = append(args, member, strconv.FormatInt(next[i], 10))
		}
	}
	if len(args) > 2 {
		err := s.runOn(ctx, c, s.watchdogSchedule, []string{schedule}, args).Error()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("watchdog schedule update failed; the renewals are retried", "err", err)
		}
		if s.rl != nil {
			// The other masters' copies of the schedule move on too, or each would claim the
			// lease again: up to one renewal per master instead of one.
			args[0] = "follow"
			for _, m := range s.rl.masters {
				if m.client != c {
					s.rl.late.Add(1)
					go func() {
						defer s.rl.late.Done()
						_ = s.runOn(ctx, m.client, s.watchdogSchedule, []string{schedule}, args).Error()
					}()
				}
			}
		}
	}
	return len(due)
}

// anyDue reports, for a shard's single leases' schedule and its multi-locks', whether its
// earliest renewal is due, or may be: an idle sweep is one round trip of three cheap reads and no
// script (on Redis Cluster, one small script on the shard's node). Due times are compared with the
// Redis clock (read in the same round trip), never this host's, so a skewed gateway clock delays
// nothing.
func (s *Service) anyDue(ctx context.Context, c rueidis.Client, shard scheduleShard) [2]bool {
	var due [2]bool
	if s.cluster { // TIME has no slot: it would be read on another node than the schedule's
		r, err := s.run(ctx, s.watchdogDue, []string{shard.leases, shard.groups}, nil).AsIntSlice()
		if err != nil || len(r) != 2 {
			return [2]bool{ctx.Err() == nil, ctx.Err() == nil} // let the claim report it
		}
		return [2]bool{r[0] == 1, r[1] == 1}
	}
	res := c.DoMulti(ctx,
		c.B().Zrange().Key(shard.leases).Min("0").Max("0").Withscores().Build(),
		c.B().Zrange().Key(shard.groups).Min("0").Max("0").Withscores().Build(),
		c.B().Time().Build())
	now, err := res[2].AsStrSlice()
	nowMs := int64(-1)
	if err == nil && len(now) == 2 {
		sec, _ := strconv.ParseInt(now[0], 10, 64)
		usec, _ := strconv.ParseInt(now[1], 10, 64)
		nowMs = sec*1000 + usec/1000
	}
	for i := range due {
		first, err := res[i].AsZScores()
		switch {
		case err != nil:
			due[i] = ctx.Err() == nil // let the claim report it
		case len(first) == 0:
		default:
			due[i] = nowMs < 0 || first[0].Score <= float64(nowMs)
		}
	}
	return due
}

// renewDue renews the lease of one schedule member. It returns when the next renewal is due
// (Redis time in ms), 0 when the lease leaves the schedule, or -1 when the renewal failed and must be retried.
func (s *Service) renewDue(ctx context.Context, member string) int64 {
	parts := strings.Split(member, "\n")
	if len(parts) < 2 {
		return 0
	}
	ref, lease := LockRef(parts[0]), parts[1]
	if len(parts) == 3 && parts[2] == "s" {
		ref.Kind = KindSemaphore
	}
	lock := ref.Name
	k := s.keys(ref)
	if s.rl != nil {
		return s.renewDueRedLock(ctx, ref, lease)
	}
	r, err := s.run(ctx, s.watchdogRenew, []string{k.lock, k.sh, k.shm}, []string{lease}).AsIntSlice()
	if err == nil && (len(r) == 0 || (r[0] == 1 && len(r) != 2)) {
		err = unexpectedReply("watchdog renew", lock, r, nil)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return -1
		}
		s.failures.Add(1)
		s.obs.WatchdogRenewal("error")
		s.log.Warn("watchdog renewal failed; retrying", ref.Kind.String(), lock, "err", err, "failures", s.failures.Load())
		return -1
	}
	if r[0] == 0 {
		s.obs.WatchdogRenewal("ended")
		return 0
	}
	s.obs.WatchdogRenewal("renewed")
	return r[1]
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
		if errors.Is(err, context.Canceled) {
			return -1
		}
		s.failures.Add(1)
		s.obs.WatchdogRenewal("error")
		s.log.Warn("watchdog renewal failed; retrying", "multilock", m.ID, "err", err, "failures", s.failures.Load())
		return -1
	}
	s.obs.WatchdogRenewal("renewed")
	return r.now + r.ttl.Milliseconds()/3
}
