package lockcore

import (
	"context"
	"log/slog"
	"time"
)

// Options configure a Service. Zero values mean the documented defaults.
type Options struct {
	// KeyPrefix starts every Redis key and channel. Default "leasegate:". It must not contain
	// '{' or '}', which would break the per-lock hash tag, nor whitespace or control characters,
	// which would break the pub/sub messages that carry lock keys (see notify in lib.lua).
	KeyPrefix string
	// Redisson names the locks that are Redisson's objects of the same name (see layout.go): their
	// holds exclude Redisson's clients' and the other way round. Redis 7 or later; not on RedLock.
	Redisson RedissonNames
	// PingTimeout bounds Ping. Default 2s.
	PingTimeout time.Duration
	// Logger receives what lockcore has to report outside any request. Default slog.Default().
	Logger *slog.Logger
	// FenceTTL is how long the fence floor (the last fence granted, one key per Redis, or per hash
	// slot on a Cluster and RedLock: see deployment.fences) is kept in Redis after the last grant
	// under it. Default 10m. Fences stay strictly increasing after it is gone (they never fall
	// behind the Redis clock in µs, which is the other floor of every new fence); while it lives it
	// also covers a Redis clock that steps back. No key is kept per lock name.
	FenceTTL time.Duration

	// Waiting (see wait.go). Heartbeat is how often a replica refreshes the queue entries of its
	// waiters (default 250ms); Liveness how long an entry outlives its last refresh (default 750ms),
	// which bounds how long a dead replica's waiters stay in line; ClaimTTL how long a lock handed
	// to a waiter stays reserved for it until its replica confirms (default 750ms).
	Heartbeat, Liveness, ClaimTTL time.Duration
	// MaxWaiters caps the waiting acquires this Service holds at once (default 10,000); beyond it
	// Acquire answers ErrTooManyWaiters.
	MaxWaiters int
	// TicketGrace is how long after a wait ends its queue ticket still resumes the waiter's place
	// (default 10s).
	TicketGrace time.Duration
	// IdempotencyWindow is how long the first answer to a request with an Idempotency-Key is kept
	// for its retries: this, or the lease's TTL if longer (default 10m).
	IdempotencyWindow time.Duration
	// ReplicaAcks, when above 0, makes every grant, re-entry and renewal wait until that many
	// replicas acknowledge it (WAIT), up to ReplicaAckTimeout (default 500ms); a grant they do
	// not acknowledge in time is undone and answered ErrUnavailable (see replica_acks.go).
	ReplicaAcks       int
	ReplicaAckTimeout time.Duration
	// CountReplicas, when set (and ReplicaAcks is 0), makes every replica the deployment knows
	// acknowledge each grant: it counts them, and is asked again every few seconds. Until its
	// first count succeeds, grants answer ErrUnavailable.
	CountReplicas func(context.Context) (int, error)
	// Observer hears grants, releases, waits, watchdog renewals and script calls, for metrics.
	// Default: nobody.
	Observer Observer
	// LongHold is the age from which a hold counts as long (default 10m): every sweep (every
	// LongHold/4, at most 10 s) reports the long holds' count and the oldest one's age to
	// OnLongHoldSweep, logs each long hold once, and reports whether Redis answered to
	// OnRedisCheck (see long_holds.go).
	// RestartGuard is, on RedLock (NewRedLock), how long a master that restarted is not counted
	// toward any quorum: at least the largest TTL a lease can have (see redlock.go).
	RestartGuard time.Duration
	// RedLockNewDeployment says the RedLock masters are new: when none of them carries a record
	// of its Redis process, they are recorded without a restart guard. Masters that all lost
	// their data look the same: set it on a deployment's first start only.
	RedLockNewDeployment bool
	// MaxHeld caps the locks and semaphore permits one principal (AcquireRequest.Principal) holds
	// at once across every replica, counting its waiting requests (0: no cap; see held_quota.go).
	// Not on RedLock.
	MaxHeld int
	// ElectionLog is how many entries an election's log keeps (default 1000), ElectionLogBytes how
	// many bytes of them (default 128 KiB; an entry counts its fields' names and values and 16, and
	// the last entry is always kept): an observer that comes back with the id of an older one gets
	// a fresh state (see ElectionStream). ElectionRetention is how long an election's log and
	// announced value are kept after its last announcement or check (a leader's renewal checks;
	// default 1h).
	ElectionLog       int
	ElectionLogBytes  int
	ElectionRetention time.Duration
	LongHold          time.Duration
	OnLongHoldSweep   func(n int, oldest time.Duration)
	OnRedisCheck      func(up bool)
}
