package faultcheck

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

// The fault checker's deployments (faultModes' deploy functions) and the faults each one takes.
// lock): CLIENT KILL of the gateways' pub/sub and of their normal connections, and a stall of
// stall() by DEBUG SLEEP or CLIENT PAUSE. settle waits for the deployment to be whole after the
// stall of r from from to woke (a stall longer than Sentinel's down-after is a failover) and
// returns when the outage ended: woke, or when the gateways could reach a new master.
func redisFaults(where func(*faultCheck, *rand.Rand) *harness.Redis, stall func(*rand.Rand) time.Duration,
	settle func(fc *faultCheck, r *harness.Redis, from, woke time.Time) (time.Time, error)) []fault {
	stalled := func(fc *faultCheck, r *harness.Redis, from time.Time) error {
		end, err := settle(fc, r, from, time.Now())
		fc.outage(from, end)
		return err
	}
	return []fault{
		{kind: "CLIENT KILL pubsub", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
			r := where(fc, rng)
			fc.note("CLIENT KILL TYPE pubsub on " + r.Addr)
			_, _ = r.Do("CLIENT", "KILL", "TYPE", "pubsub")
			return nil
		}},
		{kind: "CLIENT KILL normal", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
			r := where(fc, rng)
			fc.note("CLIENT KILL TYPE normal on " + r.Addr)
			_, _ = r.Do("CLIENT", "KILL", "TYPE", "normal")
			return nil
		}},
		{kind: "DEBUG SLEEP", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
			r, d := where(fc, rng), stall(rng)
			fc.note(fmt.Sprintf("DEBUG SLEEP %.3f on %s", d.Seconds(), r.Addr))
			from := time.Now()
			_, _ = r.Do("DEBUG", "SLEEP", fmt.Sprintf("%.3f", d.Seconds()))
			return stalled(fc, r, from)
		}},
		{kind: "CLIENT PAUSE", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
			r, d := where(fc, rng), stall(rng)
			fc.note(fmt.Sprintf("CLIENT PAUSE %d ALL on %s", d.Milliseconds(), r.Addr))
			from := time.Now()
			_, _ = r.Do("CLIENT", "PAUSE", fmt.Sprint(d.Milliseconds()), "ALL")
			_, _ = r.Do("PING") // answered when the pause ends
			return stalled(fc, r, from)
		}},
	}
}

// switchAllowance is how long after the sentinels or the cluster name a new master the outage is
// taken to last: the gateways' clients follow the news (rueidis hears +switch-master, or a MOVED).
const switchAllowance = 500 * time.Millisecond

// standaloneDeployment is one redis-server, with AOF (fsync always) or no persistence at all. A
// crash is kill -9 and a restart on the same port.
func standaloneDeployment(aof bool) func(t *testing.T) *deployment {
	return func(t *testing.T) *deployment {
		args := []string{"--appendonly", "no"}
		if aof {
			args = []string{"--appendonly", "yes", "--appendfsync", "always"}
		}
		r := harness.NewRedis(t, harness.RedisOptions{Args: args})
		d := &deployment{gateway: harness.GatewayOptions{Redis: r}}
		d.faults = append(redisFaults(func(*faultCheck, *rand.Rand) *harness.Redis { return r },
			func(*rand.Rand) time.Duration { return 800 * time.Millisecond },
			func(_ *faultCheck, _ *harness.Redis, _, woke time.Time) (time.Time, error) { return woke, nil }),
			fault{kind: "redis kill -9 and restart", weight: 1, inject: func(fc *faultCheck, _ *rand.Rand) error {
				fc.note("kill -9 of redis, and its return")
				from := time.Now()
				_ = r.Kill()
				err := r.Restart()
				fc.outage(from, time.Now())
				return err
			}})
		return d
	}
}

// sentinelDeployment is a master, two replicas and three sentinels (down-after 1 s), the gateways
// asking for acks replica acknowledgements. Its faults: kill -9 of the master (a failover; the
// old master returns as a replica), SENTINEL FAILOVER (the old master stays up and writable until
// the sentinels demote it), stalls of the master of 0.3-3.5 s (longer than down-after: the
// sentinels fail over while the old master lives), CLIENT KILL.
func sentinelDeployment(acks string) func(t *testing.T) *deployment {
	return func(t *testing.T) *deployment {
		rig := harness.NewSentinelRig(t, harness.SentinelOptions{})
		settle := func() error { return rig.AwaitSettled(settleWithin) }
		// afterStall settles the rig after a stall of old from from to woke; the outage lasted
		// until then, or until the sentinels named another master.
		afterStall := func(fc *faultCheck, old *harness.Redis, from, woke time.Time) (time.Time, error) {
			deadline := time.Now().Add(settleWithin)
			var switched time.Time
			for {
				if a, err := rig.MasterAddr(); err == nil && a != old.Addr && switched.IsZero() {
					switched = time.Now()
				}
				err := rig.AwaitSettled(200 * time.Millisecond)
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return time.Now(), err
				}
			}
			if a, err := rig.MasterAddr(); err == nil && a != old.Addr && switched.IsZero() {
				switched = time.Now()
			}
			if switched.IsZero() {
				return woke, nil
			}
			// From the promotion (some time into the stall) the new master took writes, and the old
			// one too once awake, until the sentinels demoted it.
			fc.h.twoMasterSpan(from, time.Now())
			fc.note(fmt.Sprintf("the sentinels failed over from %s during its stall; settled after %v", old.Addr, time.Since(from).Round(time.Millisecond)))
			return switched.Add(switchAllowance), nil
		}
		d := &deployment{gateway: harness.GatewayOptions{RedisURL: rig.URL(), Env: map[string]string{"LEASEGATE_REPLICA_ACKS": acks}}}
		d.faults = append(redisFaults(func(*faultCheck, *rand.Rand) *harness.Redis { return rig.Master() },
			func(rng *rand.Rand) time.Duration { return time.Duration(300+rng.IntN(3200)) * time.Millisecond }, afterStall),
			fault{kind: "master kill -9 (failover)", weight: 1, inject: func(fc *faultCheck, _ *rand.Rand) error {
				old := rig.Master()
				from := time.Now()
				if err := rig.KillMaster(); err != nil {
					return err
				}
				addr, err := rig.AwaitFailover(faultFailoverWithin)
				fc.note(fmt.Sprintf("kill -9 of master %s; %s promoted after %v", old.Addr, addr, time.Since(from).Round(time.Millisecond)))
				fc.outage(from, time.Now().Add(switchAllowance))
				if err != nil {
					return err
				}
				if err := old.Restart(); err != nil {
					return err
				}
				if err := fc.demoted(old); err != nil {
					return err
				}
				return settle()
			}},
			fault{kind: "SENTINEL FAILOVER", weight: 1, inject: func(fc *faultCheck, _ *rand.Rand) error {
				old := rig.Master()
				from := time.Now()
				addr, err := rig.Failover(faultFailoverWithin)
				fc.note(fmt.Sprintf("SENTINEL FAILOVER from %s; %s promoted after %v", old.Addr, addr, time.Since(from).Round(time.Millisecond)))
				fc.outage(from, time.Now().Add(switchAllowance))
				if err != nil {
					return err
				}
				// The old master takes writes until the sentinels demote it.
				err = settle()
				fc.h.twoMasterSpan(from, time.Now())
				return err
			}})
		return d
	}
}

// clusterDeployment is a Redis Cluster of three masters with a replica each (node timeout 2 s),
// the gateways asking for acks replica acknowledgements. Its faults: kill -9 of the master of a
// checked lock (its replica takes over, the old master returns as a replica), migrations of a
// checked lock's slot to another master, at once or key by key 20-200 ms apart (a window of
// ASK redirections and TRYAGAIN for scripts whose keys are split), stalls of 0.8 s, CLIENT KILL.
func clusterDeployment(acks string) func(t *testing.T) *deployment {
	return func(t *testing.T) *deployment {
		rig := harness.NewClusterRig(t, harness.ClusterOptions{})
		settle := func() error { return rig.AwaitHealthy(settleWithin) }
		// lockMaster returns the master of a checked lock's slot, and the slot.
		lockMaster := func(fc *faultCheck, rng *rand.Rand) (*harness.Redis, int) {
			slot := harness.KeySlot(fc.prefix + "{" + hashTag(fc.locks[rng.IntN(len(fc.locks))]) + "}")
			return rig.NodeForSlot(slot), slot
		}
		migrate := func(fc *faultCheck, rng *rand.Rand, paced bool) error {
			from, slot := lockMaster(fc, rng)
			var to []*harness.Redis
			for _, m := range rig.Masters() {
				if m.Addr != from.Addr {
					to = append(to, m)
				}
			}
			target := to[rng.IntN(len(to))]
			start := time.Now()
			var err error
			if paced {
				err = rig.MigrateSlotPaced(slot, from, target, func() time.Duration { return time.Duration(20+rng.IntN(180)) * time.Millisecond })
			} else {
				err = rig.MigrateSlot(slot, from, target)
			}
			fc.note(fmt.Sprintf("migrate slot %d from %s to %s (paced %v): %v", slot, from.Addr, target.Addr, paced, time.Since(start).Round(time.Millisecond)))
			if paced { // scripts whose keys it split answered TRYAGAIN meanwhile
				fc.outage(start, time.Now())
			}
			return err
		}
		d := &deployment{gateway: harness.GatewayOptions{RedisURL: rig.URL(), Env: map[string]string{"LEASEGATE_REPLICA_ACKS": acks}}}
		d.faults = append(redisFaults(func(fc *faultCheck, rng *rand.Rand) *harness.Redis { m, _ := lockMaster(fc, rng); return m },
			func(*rand.Rand) time.Duration { return 800 * time.Millisecond },
			func(_ *faultCheck, _ *harness.Redis, _, woke time.Time) (time.Time, error) { return woke, settle() }),
			fault{kind: "master kill -9 (failover)", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
				old, _ := lockMaster(fc, rng)
				from := time.Now()
				if err := rig.KillMaster(old.Addr); err != nil {
					return err
				}
				addr, err := rig.AwaitFailover(faultFailoverWithin)
				fc.note(fmt.Sprintf("kill -9 of master %s; %s took over after %v", old.Addr, addr, time.Since(from).Round(time.Millisecond)))
				fc.outage(from, time.Now().Add(switchAllowance))
				if err != nil {
					return err
				}
				if err := old.Restart(); err != nil {
					return err
				}
				if err := fc.demoted(old); err != nil {
					return err
				}
				return settle()
			}},
			fault{kind: "slot migration", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error { return migrate(fc, rng, false) }},
			fault{kind: "slot migration key by key", weight: 2, inject: func(fc *faultCheck, rng *rand.Rand) error { return migrate(fc, rng, true) }})
		return d
	}
}

// redlockMaxTTL is the RedLock gateways' LEASEGATE_MAX_TTL (the workload's longest TTL is
// watchdogTTL): a restarted master stays uncounted for it plus 1 s.
const redlockMaxTTL = watchdogTTL

// redlockDeployment is five independent masters. Its faults: kill -9 of one or two masters, back
// empty 0.2-1.5 s later; a restart (empty) of one master; a stall of one master for 0.3-2 s
// (DEBUG SLEEP); CLIENT KILL on one master. At most two masters are down or within their restart
// guard at once (a kill waits until that holds), so a majority always keeps its data.
func redlockDeployment(t *testing.T) *deployment {
	rig := harness.NewRedLockRig(t, 5)
	d := &deployment{
		gateway: harness.GatewayOptions{Env: map[string]string{"LEASEGATE_REDLOCK_URLS": rig.URLs(),
			"LEASEGATE_MAX_TTL": redlockMaxTTL.String(), "LEASEGATE_DEFAULT_TTL": redlockMaxTTL.String()}},
		// The rig's masters are new: recorded without a restart guard at the first start only.
		firstEnv: map[string]string{"LEASEGATE_REDLOCK_NEW_DEPLOYMENT": "true"},
		quorum:   3,
	}
	rl := &redlockFaults{rig: rig, until: make([]time.Time, len(rig.Masters()))}
	d.faults = []fault{
		{kind: "RedLock kill -9 of 1-2 masters", weight: 2, inject: func(fc *faultCheck, rng *rand.Rand) error {
			return rl.crash(fc, rng, 1+rng.IntN(2), time.Duration(200+rng.IntN(1300))*time.Millisecond)
		}},
		{kind: "RedLock restart empty", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
			return rl.crash(fc, rng, 1, 0)
		}},
		{kind: "RedLock stall", weight: 2, inject: func(fc *faultCheck, rng *rand.Rand) error {
			i := rl.undisturbed(rng)[0]
			d := time.Duration(300+rng.IntN(1700)) * time.Millisecond
			fc.note(fmt.Sprintf("stall of RedLock master %d for %v", i, d))
			from := time.Now()
			done, err := rig.Stall(i, d)
			if err != nil {
				return err
			}
			select {
			case err = <-done:
			case <-time.After(d + 10*time.Second):
				err = fmt.Errorf("master %d stalled for %v still does not answer", i, d)
			}
			fc.disturbed(i, from, time.Now())
			return err
		}},
		{kind: "CLIENT KILL normal", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
			i := rl.undisturbed(rng)[0]
			fc.note(fmt.Sprintf("CLIENT KILL TYPE normal on RedLock master %d", i))
			_, _ = rig.Master(i).Do("CLIENT", "KILL", "TYPE", "normal")
			return nil
		}},
	}
	return d
}

// redlockFaults keeps what the RedLock faults need: which masters are down or within their
// restart guard, until when.
type redlockFaults struct {
	rig   *harness.RedLockRig
	until []time.Time // master i is disturbed (down, restarted and guarded) until until[i]
}

// redlockMinority is how many masters may be disturbed at once: a minority of five.
const redlockMinority = 2

// undisturbed returns the masters that are neither down nor within their guard, shuffled.
func (rl *redlockFaults) undisturbed(rng *rand.Rand) []int {
	var out []int
	for i, u := range rl.until {
		if time.Now().After(u) {
			out = append(out, i)
		}
	}
	rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

// crash kills n masters (kill -9), leaves them down for down, and restarts them empty; it first
// waits until no more than a minority will be disturbed at once. A restarted master counts as
// disturbed until its restart guard (LEASEGATE_MAX_TTL + 1 s) and a second of slack have passed.
func (rl *redlockFaults) crash(fc *faultCheck, rng *rand.Rand, n int, down time.Duration) error {
	for len(rl.until)-len(rl.undisturbed(rng)) > redlockMinority-n {
		next := time.Time{}
		for _, u := range rl.until {
			if time.Now().Before(u) && (next.IsZero() || u.Before(next)) {
				next = u
			}
		}
		<-time.After(time.Until(next) + time.Millisecond) // pacing: the earlier restart's guard
	}
	idx := rl.undisturbed(rng)[:n]
	fc.note(fmt.Sprintf("kill -9 of RedLock masters %v, back empty after %v", idx, down))
	from := time.Now()
	if err := rl.rig.Kill(idx...); err != nil {
		return err
	}
	if down > 0 {
		<-time.After(down) // the fault's length
	}
	if err := rl.rig.RestartEmpty(idx...); err != nil {
		return err
	}
	guarded := time.Now().Add(redlockMaxTTL + 2*time.Second)
	for _, i := range idx {
		rl.until[i] = guarded
		fc.disturbed(i, from, guarded)
	}
	return nil
}
