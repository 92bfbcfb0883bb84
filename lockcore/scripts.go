package lockcore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/luascripts"
)

// script is one Lua script of package luascripts as lockcore runs it.
type script struct {
	name string // in metrics (Observer.ScriptCall)
	lua  *rueidis.Lua
	// src and sha let replica acks send it by hand, on the connection WAIT then goes on.
	src, sha string
	// grants: it grants or extends a hold, so with replica acks it is followed by WAIT.
	grants bool
}

type scriptUse uint8

const (
	writes scriptUse = iota
	readsOnly
	grantsHolds
)

func newScript(name, src string, use scriptUse) *script {
	sum := sha1.Sum([]byte(src))
	sc := &script{name: name, src: src, sha: hex.EncodeToString(sum[:]), grants: use == grantsHolds}
	if use == readsOnly {
		sc.lua = rueidis.NewLuaScriptReadOnly(src)
	} else {
		sc.lua = rueidis.NewLuaScript(src)
	}
	return sc
}

// scripts is every script lockcore runs: each file of package luascripts opens with its contract.
var scripts = struct {
	// On one lock (or semaphore), built on lib.lua: KEYS and the leading ARGV come from lockCall.
	acquire, reenter, release, renew, dequeue, heartbeat, force *script
	// One replica's waiters on many locks at once.
	keepalive *script
	// On several locks at once, built on lib.lua.
	multiAcquire, multiRelease, multiRenew *script
	// Reading a lock, its line (for the listings), and its live events; whether a lease was
	// force-released.
	inspect, waiting, watch, watchSnapshot, forced *script
	// The watchdog's schedule, and the ledgers (long holds, held quota).
	watchdogRenew, watchdogSchedule, watchdogDue, aged, held *script
	// RedLock's own (see redlock.go).
	redlockGuard, redlockFence, redlockYield, redlockSettle *script
	// Elections' announcements (see election.go): election.lua's elect and proclaim are followed
	// by WAIT when grants are (replica acks), so that a leader told it leads was announced on the
	// replicas too; its check (a read that may announce a lapse) is not.
	election, electionCheck, electionResign *script
}{
	acquire:          newScript("acquire", luascripts.Acquire, grantsHolds),
	reenter:          newScript("reenter", luascripts.Reenter, grantsHolds),
	release:          newScript("release", luascripts.Release, writes),
	renew:            newScript("renew", luascripts.Renew, grantsHolds),
	dequeue:          newScript("dequeue", luascripts.Dequeue, writes),
	heartbeat:        newScript("heartbeat", luascripts.Heartbeat, writes),
	keepalive:        newScript("keepalive", luascripts.Keepalive, writes),
	force:            newScript("force", luascripts.Force, writes),
	multiAcquire:     newScript("multi_acquire", luascripts.MultiAcquire, grantsHolds),
	multiRelease:     newScript("multi_release", luascripts.MultiRelease, writes),
	multiRenew:       newScript("multi_renew", luascripts.MultiRenew, grantsHolds),
	inspect:          newScript("inspect", luascripts.Inspect, readsOnly),
	waiting:          newScript("waiting", luascripts.Waiting, readsOnly),
	watch:            newScript("watch", luascripts.Watch, writes),
	watchSnapshot:    newScript("watch_snapshot", luascripts.WatchSnapshot, writes),
	forced:           newScript("forced", luascripts.Forced, readsOnly),
	watchdogRenew:    newScript("watchdog_renew", luascripts.WatchdogRenew, writes),
	watchdogSchedule: newScript("watchdog_schedule", luascripts.WatchdogSchedule, writes),
	watchdogDue:      newScript("watchdog_due", luascripts.WatchdogDue, readsOnly),
	aged:             newScript("aged", luascripts.Aged, readsOnly),
	held:             newScript("held", luascripts.Held, writes),
	redlockGuard:     newScript("redlock_guard", luascripts.RedlockGuard, writes),
	redlockFence:     newScript("redlock_fence", luascripts.RedlockFence, writes),
	redlockYield:     newScript("redlock_yield", luascripts.RedlockYield, writes),
	redlockSettle:    newScript("redlock_settle", luascripts.RedlockSettle, writes),
	election:         newScript("election", luascripts.Election, grantsHolds),
	electionCheck:    newScript("election_check", luascripts.Election, writes),
	electionResign:   newScript("election_resign", luascripts.ElectionResign, writes),
}

// call is one run of a script: its KEYS and ARGV, and on the scripts of one lock what it is
// about, which a deployment of several masters (RedLock) reads to make their replies one.
type call struct {
	script     *script
	keys, args []string
	on         *lockCall // nil for the scripts that are not on one lock
	about      about
}

// about is what a call on one lock asks, in words rather than ARGV positions.
type about struct {
	lease      string
	ttl        time.Duration // the TTL asked for (0: keep the lease's)
	mode       string        // the hold taken or given back: "x" or "s" (lib.lua's)
	waiting    bool          // a waiter's call: its enqueue, or its confirmation of a hand-off
	idempotent bool          // it carries an Idempotency-Key: its retry replays it
}

// lockCall is what every script built on lib.lua takes first: the lock's seven keys, and the
// common ARGV [grants channel prefix, claim_ms, liveness_ms, fence_ttl_ms, clock_us, kind].
type lockCall struct {
	keys   keys
	common []string
}

// call returns a call of sc on the lock: its keys then extra, its common ARGV then own.
func (lc *lockCall) call(sc *script, extra []string, own ...string) call {
	return call{script: sc, keys: lc.keys.with(extra...), args: append(slices.Clip(lc.common), own...), on: lc}
}

// runner runs scripts on one client and tells the observer their name, outcome and latency.
type runner struct{ obs Observer }

func (r runner) run(ctx context.Context, c rueidis.Client, sc *script, keys, args []string) rueidis.RedisResult {
	start := time.Now()
	res := sc.lua.Exec(ctx, c, keys, args)
	err := res.Error()
	failed := err != nil && !rueidis.IsRedisNil(err)
	r.obs.ScriptCall(sc.name, failed, time.Since(start))
	if failed {
		r.obs.RedisError()
	}
	return res
}

// ints reads the integer elements of a script reply.
func ints(reply []rueidis.RedisMessage) ([]int64, error) {
	out := make([]int64, len(reply))
	for i := range reply {
		v, err := reply[i].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}
