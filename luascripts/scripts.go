// Package luascripts holds leasegate's Redis Lua scripts, one file per atomic operation. Each file
// opens with its contract: the KEYS and ARGV it takes and the replies it gives.
//
// Layout of one lock named N under prefix P (every key shares the hash tag {N}, so a lock's keys
// live in one Redis Cluster slot):
//
//	P{N}        hash  <lease id> -> reentry count, plus metadata fields whose names start with ':'
//	                  (:owner, :fence, :ttl, :wd, :until); PEXPIRE = the lease's TTL. It is the
//	                  only key of an exclusively held lock: its fence is its :fence field
//	Pfence      string, the fence floor: the last fence granted to any lock or semaphore of this
//	            Redis (on Redis Cluster and RedLock, one per hash slot: P{<slot tag>}fence, in the
//	            slot of the locks it serves); every grant raises it (see next_fence in core.lua),
//	            and it expires LEASEGATE_FENCE_TTL (default 10 min) after the last grant under it.
//	            No key is kept per lock name: a free name leaves nothing in Redis
//	P{N}:q, P{N}:qd, P{N}:qm   the wait queue (see lib.lua); they exist only while someone waits,
//	            and expire eight to ten liveness windows after the last enqueue, keepalive or
//	            heartbeat (keepalive.lua pushes their expiry once two windows of it passed)
//	Pwatchdog   zset "<N>\n<lease>" -> when its next renewal is due (ms, Redis time): the watchdog
//	            schedule every replica sweeps (see watchdog_schedule.lua and watchdog_renew.lua)
//	Pwatchdog:multi  zset "<group lease>\n<x|s>\n<member>\n<member>..." -> the same, for
//	            multi-locks (renewed by multi_renew.lua, all members at once)
//	            (on Redis Cluster both are 8 shards: Pwatchdog:{0}..{7} and Pwatchdog:{i}:multi)
//	P{N}:watch  hash  replica -> until when it streams N's live events, plus :seq and :epoch; it
//	            exists only while some replica streams N's events (see notify in lib.lua)
//	P{N}:forced:<lease>  string, when (Redis ms) a force release removed that lease's holds; kept
//	            as long as the fence key, so that a 410 to its token can say why (force.lua)
//	Pheld:{A}   zset  the holds principal A counts -> until when (ms, Redis time): its ledger for
//	            the cap on what it holds at once (held.lua; only with LEASEGATE_QUOTA_HELD)
//	Pidem-key:{K}  string  the fingerprint of the first request sent with Idempotency-Key K (scoped
//	            to its principal), kept as long as its answer (claim.lua, or SET NX GET)
//	P{N}:elect...  an election N: a lock's keys under P{N}:elect (its hash, its line...),
//	            plus P{N}:elect:leader (hash) and P{N}:elect:log (stream), see lib_election.lua
//
// A multi-lock's members are ordinary locks held by one lease "m-<uuid>"; its scripts
// (multi_*.lua) take the keys of every member, which may live in different hash tags.
//
// Scripts that grant, queue or hint start with core.lua's and lib.lua's helpers: their exported
// source is core + lib + body. Acquire, Release and Renew put their uncontended fast path between
// core and lib, so that the common call returns before lib's helpers are defined (see core.lua);
// Acquire also its path for a waiter joining behind an exclusive holder (acquire_join_fast.lua).
package luascripts

import _ "embed"

//go:embed core.lua
var core string

// lib.lua's helpers come in files by concept, joined in this order (each uses only those before
// it): the common keys and arguments, the layout (names shared with Redisson), live events,
// holders, idempotency records, the queue.

//go:embed lib.lua
var libBase string

//go:embed lib_layout.lua
var libLayout string

//go:embed lib_notify.lua
var libNotify string

//go:embed lib_holders.lua
var libHolders string

//go:embed lib_idempotency.lua
var libIdempotency string

//go:embed lib_queue.lua
var libQueue string

var libBody = libBase + libLayout + libNotify + libHolders + libIdempotency + libQueue

var lib = core + libBody

// claim reads a request's Idempotency-Key claim, when the call carries it (claim.lua): it opens
// every script a request with a key runs, and claimCheck takes it, after the fast paths.
//
//go:embed claim.lua
var claim string

const claimCheck = "do\n  local refused = claim_checked()\n  if refused then\n    return refused\n  end\nend\n"

// settled runs body, a script that changes holds, as a function, then settle (lib_layout.lua):
// the layout's last word on every lock the script took, whichever way the body returned.
func settled(body string) string {
	return "local function body()\n" + body + "\nend\nlocal reply = body()\nsettle()\nreturn reply\n"
}

//go:embed acquire.lua
var acquire string

//go:embed acquire_fast.lua
var acquireFast string

//go:embed acquire_join_fast.lua
var acquireJoinFast string

// Acquire grants a free lock to a new lease, or queues the lease behind the holder.
var Acquire = claim + core + acquireFast + acquireJoinFast + claimCheck + libBody + settled(acquire)

//go:embed release.lua
var release string

//go:embed release_fast.lua
var releaseFast string

// Release decrements a lease's reentry count; at zero it hands the lock to the first waiter.
var Release = claim + core + releaseFast + claimCheck + libBody + settled(release)

//go:embed dequeue.lua
var dequeue string

// Dequeue takes a waiter that gave up out of the queue, passing on a grant that reached it.
var Dequeue = lib + settled(dequeue)

//go:embed heartbeat.lua
var heartbeat string

// Heartbeat looks after one lock for one replica's waiters: it keeps them in line, hands a lock
// whose holder expired on, and finds grants and queue entries that pub/sub or Redis lost.
var Heartbeat = lib + settled(heartbeat)

//go:embed keepalive.lua
var keepalive string

// Keepalive keeps one replica's waiters in line on many locks at once, and names the locks that
// need Heartbeat.
var Keepalive = lib + keepalive

//go:embed reenter.lua
var reenter string

// Reenter increments the reentry count of a held lease.
var Reenter = claim + claimCheck + lib + settled(reenter)

//go:embed renew.lua
var renew string

//go:embed renew_fast.lua
var renewFast string

// Renew sets a held lease's TTL; it also confirms a lock handed to a waiter.
var Renew = core + renewFast + libBody + settled(renew)

//go:embed watchdog_renew.lua
var watchdogRenew string

// WatchdogRenew renews one watchdog lease when it is due.
var WatchdogRenew = core + watchdogLayout + libLayout + watchdogRenew

// watchdogLayout gives lib_layout.lua what it needs in watchdog_renew.lua (see lib.lua).
const watchdogLayout = `local lock, sh, rs, layout = KEYS[1], KEYS[2], KEYS[4], ARGV[2] or ''
local sharded = string.find(ARGV[3] or '', '{', 1, true) ~= nil
`

// WatchdogSchedule enrolls, reschedules and claims due watchdog renewals.
//
//go:embed watchdog_schedule.lua
var WatchdogSchedule string

// Inspect reads a lock's state without changing it.
//
//go:embed inspect.lua
var Inspect string

//go:embed multi_acquire.lua
var multiAcquire string

// MultiAcquire grants every member of a multi-lock to one lease, or none.
var MultiAcquire = lib + settled(multiAcquire)

//go:embed multi_release.lua
var multiRelease string

// MultiRelease gives back every member a multi-lock's lease holds.
var MultiRelease = lib + settled(multiRelease)

//go:embed multi_renew.lua
var multiRenew string

// MultiRenew renews every member of a multi-lock's lease, or gives back what is left of it.
var MultiRenew = lib + settled(multiRenew)

// WatchdogDue tells whether a watchdog schedule shard has a renewal due (Redis Cluster).
//
//go:embed watchdog_due.lua
var WatchdogDue string

//go:embed force.lua
var force string

// Force takes every hold off a lock or semaphore (force release) and hands it to the head of its
// line.
var Force = lib + settled(force)

// Forced tells whether a lease was force-released, and when (the mark force.lua leaves).
//
//go:embed forced.lua
var Forced string

// Watch keeps or drops a gateway replica's watch of a lock's live events.
//
//go:embed watch.lua
var Watch string

//go:embed watch_snapshot.lua
var watchSnapshot string

// WatchSnapshot starts (or checks on) a replica's watch of a lock's live events and reads the
// lock's state in the same step: inspect.lua's body, run as the function snapshot.
var WatchSnapshot = "local function snapshot()\n" + Inspect + "\nend\n" + watchSnapshot

// Waiting reads who waits in a lock's or semaphore's line, and since when (for the listings).
//
//go:embed waiting.lua
var Waiting string

// Aged reads the long-hold sweep's entries older than the threshold.
//
//go:embed aged.lua
var Aged string

// RedlockFence raises a master's last fence of a lock to the fence a majority granted (RedLock).
//
//go:embed redlock_fence.lua
var RedlockFence string

// RedlockGuard records a master's Redis process and starts its restart guard when it changed.
//
//go:embed redlock_guard.lua
var RedlockGuard string

//go:embed redlock_yield.lua
var redlockYield string

// RedlockYield gives a waiter's minority hold back to an earlier waiter in line (RedLock).
var RedlockYield = lib + redlockYield

//go:embed redlock_settle.lua
var redlockSettle string

// RedlockSettle takes a waiter a majority granted out of the other masters' lines (RedLock).
var RedlockSettle = lib + redlockSettle

// Held counts, extends and frees the holds of one principal's ledger, the cap on what it holds at
// once.
//
//go:embed held.lua
var Held string

//go:embed lib_election.lua
var libElection string

//go:embed election.lua
var election string

// Election announces an election's leader and its value in the election's log, or reads them.
var Election = claim + claimCheck + libElection + election

//go:embed election_resign.lua
var electionResign string

// ElectionResign announces the election leader's resignation and hands the election to the next
// candidate, in one step: release.lua's body, run as the function release_body.
var ElectionResign = claim + claimCheck + core + libBody + libElection + "local function release_body()\n" + release + "\nend\n" + electionResign
