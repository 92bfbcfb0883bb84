// Package lockcore is leasegate's lock engine: reentrant leases in Redis with fencing tokens,
// exclusive and shared holds on locks and permits of counting semaphores (keys.go: Kind, Ref),
// FIFO waiting with direct hand-off, and the watchdog. It speaks Go types and sentinel errors
// (errors.go); nothing Redis-shaped leaves it, and it knows nothing of HTTP.
//
// Files, one concept each: service.go (this: setup and Redis plumbing), acquire.go (try-once and
// re-entry), wait.go (a waiting acquire), multilock*.go (several locks at once), waiters.go (this process's waiters and its pub/sub
// subscription), heartbeat.go (keeping waiters in line, noticing expiry), release.go, renew.go,
// inspect.go, watchdog.go, token.go and ticket.go (signed lease tokens and queue tickets).
package lockcore

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/luascripts"
)

// Options configure a Service. Zero values mean the documented defaults.
type Options struct {
	// KeyPrefix starts every Redis key and channel. Default "leasegate:". It must not contain
	// '{' or '}', which would break the per-lock hash tag, nor whitespace or control characters,
	// which would break the pub/sub messages that carry lock keys (see notify in lib.lua).
	KeyPrefix string
	// PingTimeout bounds Ping. Default 2s.
	PingTimeout time.Duration
	// Logger receives what lockcore has to report outside any request. Default slog.Default().
	Logger *slog.Logger
	// FenceTTL is how long a lock's last fence is kept in Redis after its last grant. Default 24h.
	// Fences stay strictly increasing after it is gone (they never fall behind the Redis clock in
	// µs); it only bounds Redis memory by the names in use.
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
	MaxHeld         int
	LongHold        time.Duration
	OnLongHoldSweep func(n int, oldest time.Duration)
	OnRedisCheck    func(up bool)
}

// Service runs lock operations against one Redis deployment. Safe for concurrent use. Close it to
// end its waits and stop its goroutines.
type Service struct {
	client      rueidis.Client
	tokens      *Tokens
	log         *slog.Logger
	prefix      string
	chanPrefix  string // + replica ID = the channel grants for this process's waiters arrive on
	pingTimeout time.Duration

	heartbeat, claimTTL, ticketGrace, idemWindow time.Duration
	// queueArgs start the ARGV of every script built on lib.lua, formatted once (the kind follows).
	queueArgs []string

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Service started

	cluster bool         // Redis Cluster: sharded pub/sub, per-slot steps (see slots.go)
	acks    *replicaAcks // nil unless grants wait for replicas (see replica_acks.go)

	obs        Observer
	contention contention // the most contended names (contention.go)
	// the long-hold sweep (long_holds.go)
	longHold        time.Duration
	onLongHoldSweep func(int, time.Duration)
	onRedisCheck    func(bool)
	waiters         *waiters
	shards          []scheduleShard // the watchdog's schedules (see watchdog.go)
	failures        atomic.Int64

	redlockNew bool // Options.RedLockNewDeployment
	maxHeld    int  // Options.MaxHeld
	// rl is the RedLock deployment when the Service runs on several independent masters
	// (NewRedLock); nil on one Redis, Sentinel or Cluster.
	rl *redlock

	acquire, reenter, release, renew, inspect, dequeue, heartbeatScript, watchdogRenew, watchdogSchedule *rueidis.Lua
	watchdogDue                                                                                          *rueidis.Lua
	multiAcquire, multiRelease, multiRenew                                                               *rueidis.Lua
	agedScript                                                                                           *rueidis.Lua
	scriptNames                                                                                          map[*rueidis.Lua]string // for the observer
}

// New returns a Service that stores locks through client and mints tokens with tokens. It starts
// the process's pub/sub subscription for waiters and the watchdog's sweep; call Close when done.
func New(client rueidis.Client, tokens *Tokens, opts Options) (*Service, error) {
	return newService(client, nil, tokens, opts)
}

// newService is New, or NewRedLock when rl is set (client is then its first master's).
func newService(client rueidis.Client, rl *redlock, tokens *Tokens, opts Options) (*Service, error) {
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "leasegate:"
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrInvalid, opts.KeyPrefix)
	}
	if strings.ContainsFunc(opts.KeyPrefix, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return nil, fmt.Errorf("%w: key prefix %q must not contain whitespace or control characters", ErrInvalid, opts.KeyPrefix)
	}
	opts.PingTimeout = cmp.Or(opts.PingTimeout, 2*time.Second)
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.FenceTTL = cmp.Or(opts.FenceTTL, 24*time.Hour)
	opts.Heartbeat = cmp.Or(opts.Heartbeat, 250*time.Millisecond)
	opts.Liveness = cmp.Or(opts.Liveness, 750*time.Millisecond)
	opts.ClaimTTL = cmp.Or(opts.ClaimTTL, 750*time.Millisecond)
	opts.MaxWaiters = cmp.Or(opts.MaxWaiters, 10000)
	opts.TicketGrace = cmp.Or(opts.TicketGrace, 10*time.Second)
	opts.IdempotencyWindow = cmp.Or(opts.IdempotencyWindow, 10*time.Minute)
	opts.ReplicaAckTimeout = cmp.Or(opts.ReplicaAckTimeout, 500*time.Millisecond)
	if opts.MaxHeld < 0 {
		return nil, fmt.Errorf("%w: max held %d must not be negative", ErrInvalid, opts.MaxHeld)
	}
	if rl != nil && opts.MaxHeld > 0 {
		return nil, fmt.Errorf("%w: the cap on held leases is not offered on RedLock (its count would need a quorum of its own)", ErrInvalid)
	}
	if opts.ReplicaAcks < 0 {
		return nil, fmt.Errorf("%w: replica acks %d must not be negative", ErrInvalid, opts.ReplicaAcks)
	}
	if opts.ReplicaAcks > 0 && opts.CountReplicas != nil {
		return nil, fmt.Errorf("%w: replica acks are a number or every replica, not both", ErrInvalid)
	}
	if rl != nil && (opts.ReplicaAcks > 0 || opts.CountReplicas != nil) {
		return nil, fmt.Errorf("%w: replica acks do not apply to RedLock's independent masters", ErrInvalid)
	}
	if opts.Liveness <= opts.Heartbeat {
		return nil, fmt.Errorf("%w: liveness %v must exceed the heartbeat %v", ErrInvalid, opts.Liveness, opts.Heartbeat)
	}
	chanPrefix := opts.KeyPrefix + "grants:"
	s := &Service{
		client:           client,
		tokens:           tokens,
		log:              opts.Logger,
		prefix:           opts.KeyPrefix,
		chanPrefix:       chanPrefix,
		pingTimeout:      opts.PingTimeout,
		heartbeat:        opts.Heartbeat,
		claimTTL:         opts.ClaimTTL,
		ticketGrace:      opts.TicketGrace,
		idemWindow:       opts.IdempotencyWindow,
		queueArgs:        []string{chanPrefix, ms(opts.ClaimTTL), ms(opts.Liveness), ms(opts.FenceTTL)},
		acquire:          rueidis.NewLuaScript(luascripts.Acquire),
		reenter:          rueidis.NewLuaScript(luascripts.Reenter),
		release:          rueidis.NewLuaScript(luascripts.Release),
		renew:            rueidis.NewLuaScript(luascripts.Renew),
		dequeue:          rueidis.NewLuaScript(luascripts.Dequeue),
		heartbeatScript:  rueidis.NewLuaScript(luascripts.Heartbeat),
		inspect:          rueidis.NewLuaScriptReadOnly(luascripts.Inspect),
		watchdogRenew:    rueidis.NewLuaScript(luascripts.WatchdogRenew),
		watchdogSchedule: rueidis.NewLuaScript(luascripts.WatchdogSchedule),
		watchdogDue:      rueidis.NewLuaScriptReadOnly(luascripts.WatchdogDue),
		multiAcquire:     rueidis.NewLuaScript(luascripts.MultiAcquire),
		multiRelease:     rueidis.NewLuaScript(luascripts.MultiRelease),
		multiRenew:       rueidis.NewLuaScript(luascripts.MultiRenew),
		agedScript:       rueidis.NewLuaScriptReadOnly(luascripts.Aged),
		longHold:         cmp.Or(opts.LongHold, 10*time.Minute),
		onLongHoldSweep:  opts.OnLongHoldSweep,
		onRedisCheck:     opts.OnRedisCheck,
		maxHeld:          opts.MaxHeld,
	}
	if s.onLongHoldSweep == nil {
		s.onLongHoldSweep = func(int, time.Duration) {}
	}
	if s.onRedisCheck == nil {
		s.onRedisCheck = func(bool) {}
	}
	s.scriptNames = map[*rueidis.Lua]string{
		s.acquire: "acquire", s.reenter: "reenter", s.release: "release", s.renew: "renew", s.inspect: "inspect",
		s.dequeue: "dequeue", s.heartbeatScript: "heartbeat", s.watchdogRenew: "watchdog_renew",
		s.watchdogSchedule: "watchdog_schedule", s.watchdogDue: "watchdog_due", s.multiAcquire: "multi_acquire",
		s.multiRelease: "multi_release", s.multiRenew: "multi_renew", s.agedScript: "aged", forceScript: "force",
		watchScript: "watch", watchSnapshotScript: "watch_snapshot", heldScript: "held",
	}
	s.obs = opts.Observer
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	s.cluster = client.Mode() == rueidis.ClientModeCluster
	s.shards = scheduleShards(opts.KeyPrefix, s.cluster)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if opts.ReplicaAcks > 0 || opts.CountReplicas != nil {
		s.acks = &replicaAcks{client: client, timeout: cmp.Or(opts.ReplicaAckTimeout, 500*time.Millisecond),
			fixed: int64(opts.ReplicaAcks), count: opts.CountReplicas, log: s.log,
			scripts: map[*rueidis.Lua]ackedScript{
				s.acquire: newAckedScript(luascripts.Acquire), s.reenter: newAckedScript(luascripts.Reenter),
				s.renew: newAckedScript(luascripts.Renew), s.multiAcquire: newAckedScript(luascripts.MultiAcquire),
				s.multiRenew: newAckedScript(luascripts.MultiRenew),
			}}
		if s.acks.fixed == 0 {
			s.wg.Go(func() { s.acks.recount(s.ctx) })
		}
	}
	s.redlockNew = opts.RedLockNewDeployment
	if rl != nil {
		s.rl = rl
		rl.start(s)
	}
	s.waiters = newWaiters(s, uuid.NewString(), opts.MaxWaiters)
	s.wg.Add(2)
	go s.sweep()
	go s.longHoldSweep()
	return s, nil
}

// Close ends every wait in progress (they answer ErrUnavailable) and stops the Service's
// goroutines, waiting for them and for the waits to return. Leases and watchdog schedules stay
// in Redis, where other replicas carry on. The Service must not be used afterwards.
func (s *Service) Close() {
	// Under the waiters' lock, so that no wait or heartbeat joins s.wg after the cancel.
	s.waiters.mu.Lock()
	s.cancel()
	s.waiters.mu.Unlock()
	s.wg.Wait()
	if s.rl != nil {
		s.rl.close()
	}
}

// RenewalFailures counts watchdog renewals that failed (Redis unreachable or erroring) since start.
func (s *Service) RenewalFailures() int64 { return s.failures.Load() }

// ClientOption returns rueidis options suited to lockcore for a single Redis at addr, started
// while Redis may be down (see Tune).
func ClientOption(addr, password string) rueidis.ClientOption {
	return Tune(rueidis.ClientOption{InitAddress: []string{addr}, Password: password, ForceSingleClient: true})
}

// Tune sets what lockcore needs on rueidis options for any deployment (one Redis, Sentinel,
// Cluster; with or without TLS): no client-side cache (unused), a 3 s bound on stalled
// connections, and no silent retries (rueidis would retry read-only calls without end while Redis
// is down; lockcore answers ErrUnavailable at once and its clients retry). With ForceSingleClient,
// start-up succeeds while Redis is down.
func Tune(o rueidis.ClientOption) rueidis.ClientOption {
	o.DisableCache = true
	o.DisableRetry = true
	o.ConnWriteTimeout = 3 * time.Second
	o.Dialer.Timeout = 2 * time.Second
	return o
}

// Tokens returns the codec the Service mints tokens with.
func (s *Service) Tokens() *Tokens { return s.tokens }

// Ping reports whether Redis answers. It returns ErrUnavailable when it does not.
func (s *Service) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.pingTimeout)
	defer cancel()
	if s.rl != nil {
		return s.rl.ping(ctx)
	}
	return classify(s.client.Do(ctx, s.client.B().Ping().Build()).Error())
}

// exec runs script once. The round trip is detached from ctx's cancellation so that a caller who
// goes away cannot leave a write's outcome unknown. It carries no deadline of its own, which keeps
// rueidis on its cheapest path: a stalled or broken connection is bounded by the client's
// ConnWriteTimeout (see ClientOption), after which every call on it fails with ErrUnavailable.
//
// With replica acks on, a script that grants is followed by WAIT (see execAcked), and a grant the
// replicas did not acknowledge returns its reply with a *notAckedError.
func (s *Service) exec(ctx context.Context, script *rueidis.Lua, keys, args []string) ([]rueidis.RedisMessage, error) {
	if s.rl != nil {
		return s.rl.exec(ctx, script, keys, args)
	}
	if s.acks != nil {
		if a, ok := s.acks.scripts[script]; ok {
			return s.acks.exec(ctx, a, keys, args)
		}
	}
	res := s.run(context.WithoutCancel(ctx), script, keys, args)
	if err := res.Error(); err != nil {
		return nil, classify(err)
	}
	return res.ToArray()
}

// run runs script once and tells the observer its name, outcome and latency.
func (s *Service) run(ctx context.Context, script *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	return s.runOn(ctx, s.client, script, keys, args)
}

// runOn is run on client c: one RedLock master (see redlock.go).
func (s *Service) runOn(ctx context.Context, c rueidis.Client, script *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	start := time.Now()
	res := script.Exec(ctx, c, keys, args)
	err := res.Error()
	failed := err != nil && !rueidis.IsRedisNil(err)
	name := s.scriptNames[script]
	if name == "" {
		name = "other"
	}
	s.obs.ScriptCall(name, failed, time.Since(start))
	if failed {
		s.obs.RedisError()
	}
	return res
}

// classify turns a Redis or transport error into ErrUnavailable where retrying later can help:
// among them a Cluster redirection (ASK, MOVED) still there when a call stopped following them,
// as during a slot migration that outlasts replicaAcks' redirectBudget.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		if transientReply(rerr.Error()) {
			return fmt.Errorf("%w: %s", ErrUnavailable, rerr.Error())
		}
		return fmt.Errorf("redis: %w", err)
	}
	// Anything else is the transport: refused or broken connections, timeouts, a closing client.
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// transientReply reports whether a Redis error reply says to try again later.
func transientReply(msg string) bool {
	for _, transient := range []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "ASK ", "MOVED "} {
		if strings.HasPrefix(msg, transient) {
			return true
		}
	}
	return false
}

// runQueued runs one of the scripts built on lib.lua on lock: they take all of the lock's keys and
// the common arguments before their own.
func (s *Service) runQueued(ctx context.Context, script *rueidis.Lua, ref Ref, args ...string) ([]rueidis.RedisMessage, error) {
	k := s.keys(ref)
	return s.exec(ctx, script, k.all(), s.scriptArgs(k.lock, ref.Kind, args))
}

// runWithKeys is runQueued for the scripts that take more keys after the lock's own.
func (s *Service) runWithKeys(ctx context.Context, script *rueidis.Lua, ref Ref, extra []string, args ...string) ([]rueidis.RedisMessage, error) {
	k := s.keys(ref)
	return s.exec(ctx, script, k.with(extra...), s.scriptArgs(k.lock, ref.Kind, args))
}

// scriptArgs are the ARGV of a lib.lua script on the lock whose key is lockKey: the common ones,
// its kind, then its own.
func (s *Service) scriptArgs(lockKey string, kind Kind, own []string) []string {
	args := append(append(slices.Clip(s.queueArgs), kindArg(kind)), own...)
	if s.cluster {
		args[0] = s.chanPrefixFor(lockKey)
	}
	if s.rl != nil { // the gateway's clock, the same for every master (see core.lua)
		args[3] += " " + strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	return args
}

// chanPrefixFor is the prefix of the replicas' grant channels a script on the lock with key
// lockKey publishes to: on Redis Cluster it carries a hash tag of the lock's slot, for sharded
// pub/sub (SPUBLISH from a script must stay in the script's slot); otherwise one channel per
// replica serves every lock.
func (s *Service) chanPrefixFor(lockKey string) string {
	if !s.cluster {
		return s.chanPrefix
	}
	return s.slotChanPrefix(keySlot(lockKey))
}

func (s *Service) slotChanPrefix(slot int) string {
	return s.prefix + "{" + slotTags()[slot] + "}grants:"
}

// idemMs is the Idempotency-Key window argument of the scripts: "0" without a key.
func (s *Service) idemMs(key string) string {
	if key == "" {
		return "0"
	}
	return ms(s.idemWindow)
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
