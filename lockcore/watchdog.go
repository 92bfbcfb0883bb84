package lockcore

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// renewer renews watchdog leases on their schedule, which every replica sweeps.
type renewer struct {
	e        *engine
	shards   scheduleShards
	long     *longHolds   // the long-hold report, which a renewal may enter its lease in (nil: off)
	groups   groupRenewer // renews a multi-lock's members (the Service)
	failures atomic.Int64 // renewals that failed since start
}

// groupRenewer renews every member of the multi-lock a group schedule member names; it returns as
// watchdog.renewDue does.
type groupRenewer interface {
	renewGroupDue(ctx context.Context, member string) int64
}

func newRenewer(e *engine, shards scheduleShards, long *longHolds, groups groupRenewer) *renewer {
	return &renewer{e: e, shards: shards, long: long, groups: groups}
}

const (
	sweepEvery = 100 * time.Millisecond // how often a replica looks for due renewals
	claimHold  = 250 * time.Millisecond // a claimed renewal is retried after this if it fails
	sweepBatch = 256                    // renewals claimed per round trip
)

// schedule puts l, a watchdog lease of ttl, on the renewal schedule, its next renewal a third of
// ttl from now. A new lease is enrolled (among the long-hold candidates too, if its TTL reaches
// past the report's threshold already; else a renewal enters it when it does, see renewDue): an
// error leaves it with nobody to renew it. A lease already on it, renewed or re-entered with a
// TTL that may be shorter, has its renewal moved (one due at the old TTL's third would come too
// late); a failure to move it is logged and the lease keeps its old schedule. On RedLock a majority of masters must
// take it, so that losing a minority of them loses no renewal.
func (w *renewer) schedule(ctx context.Context, l Lease, ttl time.Duration, isNew bool) error {
	shard, member := w.shards.of(l.Lock), scheduleMember(l)
	keys, args := []string{shard.leases}, []string{"reschedule", member, ms(ttl / 3)}
	if isNew {
		if w.long.reaches(l, ttl) { // the long-hold report sweeps its candidates
			keys = append(keys, shard.candidates)
		}
		args = []string{"enroll", member, ms(ttl / 3), candidateMember(l), strconv.FormatInt(l.Fence/1000, 10)}
	}
	_, err := w.e.dep.run(ctx, call{script: scripts.watchdogSchedule, keys: keys, args: args})
	if err != nil && !isNew {
		w.e.log.Warn("rescheduling a watchdog renewal failed", l.Kind.String(), l.Lock, "err", err)
		return nil
	}
	return err
}

// unschedule takes a released lease off the watchdog schedule and the aged holds. A failure is
// harmless: the next sweeps find the lease gone and drop it then.
func (w *renewer) unschedule(ctx context.Context, l Lease) {
	shard := w.shards.of(l.Lock)
	if err := w.unlist(ctx, shard.leases, scheduleMember(l), shard.candidates, candidateMember(l)); err != nil {
		w.e.log.Warn("taking a lease off the watchdog schedule failed; the next sweep does it", l.Kind.String(), l.Lock, "err", err)
	}
}

// unlist takes member off the watchdog schedule key and candidate off the shard's long-hold candidates (see
// long_holds.go), on every copy of the schedule.
func (w *renewer) unlist(ctx context.Context, schedule, member, candidatesKey, candidate string) error {
	var err error
	for _, c := range w.e.dep.copies() {
		// One call each, not one DoMulti: a Cluster client's DoMulti has panicked on redirects
		// (see replica_acks.go). A watchdog lease's release costs a round trip more.
		for _, cmd := range []rueidis.Completed{c.B().Zrem().Key(schedule).Member(member).Build(), c.B().Zrem().Key(candidatesKey).Member(candidate).Build()} {
			err = cmp.Or(err, c.Do(context.WithoutCancel(ctx), cmd).Error())
		}
	}
	return err
}

// sweep renews due watchdog leases until the Service closes.
func (w *renewer) sweep() {
	e := w.e
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		// Each copy of the schedule that counts now, in turn: on RedLock a master down or
		// restarted may have lost its copy, and the others have it.
		for _, c := range e.dep.live() {
			for _, shard := range w.shards {
				due := w.anyDue(e.ctx, c, shard)
				for due[0] && e.ctx.Err() == nil && w.sweepOnce(c, shard.leases, w.renewDue) == sweepBatch {
				}
				for due[1] && e.ctx.Err() == nil && w.sweepOnce(c, shard.groups, w.groups.renewGroupDue) == sweepBatch {
				}
			}
		}
	}
}

// sweepOnce claims a batch of due renewals from schedule, renews them concurrently with renew
// (rueidis pipelines the calls) and records the outcome in one script. It returns how many it
// claimed.
func (w *renewer) sweepOnce(c rueidis.Client, schedule string, renew func(context.Context, string) int64) int {
	e := w.e
	ctx := e.ctx
	run := runner{obs: e.obs}.run
	claimed, err := run(ctx, c, scripts.watchdogSchedule, []string{schedule},
		[]string{"claim", ms(claimHold), strconv.Itoa(sweepBatch)}).AsStrSlice()
	if err == nil && len(claimed) == 0 {
		err = unexpectedReply("watchdog claim", "", claimed, nil)
	}
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("watchdog sweep failed; retrying", "err", err)
		}
		return 0
	}
	later, due := claimed[0], claimed[1:]
	e.obs.WatchdogSwept(len(due))
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
	args := []string{"record", later}
	for i, member := range due {
		if next[i] >= 0 {
			args = append(args, member, strconv.FormatInt(next[i], 10))
		}
	}
	if len(args) > 2 {
		err := run(ctx, c, scripts.watchdogSchedule, []string{schedule}, args).Error()
		if err != nil && ctx.Err() == nil {
			e.log.Warn("watchdog schedule update failed; the renewals are retried", "err", err)
		}
		// The other copies of the schedule (RedLock's masters) move on too, or each would claim
		// the lease again: up to one renewal per master instead of one.
		follow := append([]string{"follow"}, args[1:]...)
		for _, other := range e.dep.copies() {
			if other != c {
				e.wg.Go(func() { _ = run(ctx, other, scripts.watchdogSchedule, []string{schedule}, follow).Error() })
			}
		}
	}
	return len(due)
}

// anyDue reports, for a shard's single leases' schedule and its multi-locks', whether its
// earliest renewal is due, or may be: an idle sweep is one round trip of three cheap reads and no
// script. Due times are compared with the Redis clock, never this host's, so a skewed gateway
// clock delays nothing: read in the same round trip, or where the schedule is split into shards
// (a Cluster's, on several nodes) by a small read-only script on the shard's node, since TIME has
// no slot and would be read on another node than the schedule's.
func (w *renewer) anyDue(ctx context.Context, c rueidis.Client, shard scheduleShard) [2]bool {
	var due [2]bool
	if len(w.shards) > 1 {
		r, err := runner{obs: w.e.obs}.run(ctx, c, scripts.watchdogDue, []string{shard.leases, shard.groups}, nil).AsIntSlice()
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
// (Redis time in ms), 0 when the lease leaves the schedule, or -1 when the renewal failed and must
// be retried.
func (w *renewer) renewDue(ctx context.Context, member string) int64 {
	e := w.e
	ref, lease, ok := parseScheduleMember(member)
	if !ok {
		return 0
	}
	lc := e.lockCall(ref)
	k := lc.keys
	reply, err := e.dep.run(ctx, call{script: scripts.watchdogRenew, keys: []string{k.lock, k.sh, k.shm, k.rs},
		args: []string{lease, string(e.space.layoutOf(ref)), lc.common[0]},
		on:   lc, about: about{lease: lease}})
	var r []int64
	if err == nil {
		if r, err = ints(reply); err == nil && (len(r) == 0 || (r[0] == 1 && len(r) != 4)) {
			err = unexpectedReply("watchdog renew", ref.Name, r, nil)
		}
	}
	switch {
	case errors.Is(err, errMajorityLost):
		e.obs.WatchdogRenewal("lost")
		e.log.Warn("watchdog lease lost its majority of RedLock masters; given back", ref.Kind.String(), ref.Name, "lease", lease)
		return 0
	case err != nil:
		w.failed(ctx, err, ref.Kind.String(), ref.Name)
		return -1
	case r[0] == 0:
		e.obs.WatchdogRenewal("ended")
		return 0
	}
	e.obs.WatchdogRenewal("renewed")
	if ref.Kind == KindElection { // its log lives as long as its leader is renewed
		e.keepElection(ctx, ref)
	}
	// A lease renewed to past the long-hold threshold becomes a candidate of the report now, not at
	// its enrolment: the most watchdog leases never live that long, and each candidate entry costs
	// Redis ~160 B for the lease's whole life.
	w.long.track(ctx, Lease{Lock: ref.Name, Kind: ref.Kind, ID: lease, Fence: r[2]}, time.Duration(r[3])*time.Millisecond)
	return r[1]
}

// failed counts and reports a renewal that failed (not one the Service's closing cut short).
func (w *renewer) failed(ctx context.Context, err error, what, name string) {
	if errors.Is(err, context.Canceled) || ctx.Err() != nil || w.e.ctx.Err() != nil {
		return
	}
	w.failures.Add(1)
	w.e.obs.WatchdogRenewal("error")
	w.e.log.Warn("watchdog renewal failed; retrying", what, name, "err", err, "failures", w.failures.Load())
}
