package lockcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// Service runs lock operations against one deployment of Redis. Safe for concurrent use. Close it
// to end its waits and stop its goroutines.
type Service struct {
	engine  // where the locks live, their keys and calls, the log, the observer, the lifetime
	cancel  context.CancelFunc
	tokens  *Tokens
	cfg     settings
	waiters *waiters  // this process's waiting acquires and their subscriptions (waiters.go)
	events  *eventHub // this process's live event streams (event_hub.go)
	// elections are this process's election streams (election_stream.go)
	elections *electionHub
	watchdog  *renewer // the renewals of watchdog leases (watchdog.go)
	ledgers   ledgers  // what is counted beside the locks: held quota, long holds, contention
}

// settings are the Service's Options that its operations read.
type settings struct {
	pingTimeout                       time.Duration
	claimTTL, ticketGrace, idemWindow time.Duration
}

// ledgers are what the Service counts beside the locks. Those that are off are nil, and off the
// request's path.
type ledgers struct {
	held       heldLedger // the cap on what one principal holds (held_quota.go); noHeldLedger when off
	long       *longHolds // the long-hold report (long_holds.go); nil when the deployment lacks it
	contention contention // the most contended names (contention.go)
}

// New returns a Service that stores locks through client (one Redis, Sentinel or a Cluster) and
// mints tokens with tokens. It starts the process's pub/sub subscription for waiters and the
// watchdog's sweep; call Close when done.
func New(client rueidis.Client, tokens *Tokens, opts Options) (*Service, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	one := oneRedis{client: client, runner: runner{obs: opts.Observer}, chanPrefix: opts.KeyPrefix + "grants:",
		fenceKey: opts.KeyPrefix + "fence", subscribed: make(chan struct{})}
	if opts.ReplicaAcks > 0 || opts.CountReplicas != nil {
		one.acks = &replicaAcks{client: client, timeout: opts.ReplicaAckTimeout,
			fixed: int64(opts.ReplicaAcks), count: opts.CountReplicas, log: opts.Logger}
	}
	var dep deployment = &one
	if client.Mode() == rueidis.ClientModeCluster {
		dep = newRedisCluster(one, opts.KeyPrefix)
	}
	s := newService(dep, tokens, opts)
	if one.acks != nil && one.acks.fixed == 0 {
		s.wg.Go(func() { one.acks.recount(s.ctx) })
	}
	return s, nil
}

// newService composes a Service on dep from opts (with their defaults) and starts it.
func newService(dep deployment, tokens *Tokens, opts Options) *Service {
	s := &Service{
		engine: engine{dep: dep, log: opts.Logger, obs: opts.Observer,
			space: lockSpace{prefix: opts.KeyPrefix, claimMs: ms(opts.ClaimTTL), livenessMs: ms(opts.Liveness), fenceTTLMs: ms(opts.FenceTTL),
				electionLog: opts.ElectionLog, electionLogBytes: opts.ElectionLogBytes, electionRetentionMs: ms(opts.ElectionRetention), shared: opts.Redisson}},
		tokens: tokens,
		cfg: settings{pingTimeout: opts.PingTimeout, claimTTL: opts.ClaimTTL, ticketGrace: opts.TicketGrace,
			idemWindow: opts.IdempotencyWindow},
	}
	e := &s.engine
	e.ctx, s.cancel = context.WithCancel(context.Background())
	s.ledgers.held = noHeldLedger{}
	if opts.MaxHeld > 0 {
		s.ledgers.held = &heldQuota{e: e, max: opts.MaxHeld}
	}
	s.waiters = newWaiters(e, uuid.NewString(), opts)
	s.events = newEventHub(e, s.waiters)
	s.waiters.events = s.events
	s.elections = newElectionHub(s)
	dep.listen(s.waiters)
	s.waiters.followReleases(dep.copies()[0])
	s.waiters.keepInLine()
	shards := newScheduleShards(e.space.prefix, dep.shards())
	if dep.offers(featureLongHolds) == nil {
		s.ledgers.long = newLongHolds(e, shards, s, opts)
	}
	s.watchdog = newRenewer(e, shards, s.ledgers.long, s)
	e.wg.Go(s.watchdog.sweep)
	if s.ledgers.long != nil {
		e.wg.Go(s.ledgers.long.sweep)
	} else {
		e.wg.Go(func() { pingSweep(e.ctx, s.Ping, opts) })
	}
	return s
}

// withDefaults fills in the documented defaults and checks what only lockcore can.
func (opts Options) withDefaults() (Options, error) {
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "leasegate:"
	}
	var err error
	if opts.Redisson, err = opts.Redisson.withDefaults(opts.KeyPrefix); err != nil {
		return opts, err
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		return opts, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrInvalid, opts.KeyPrefix)
	}
	if strings.ContainsFunc(opts.KeyPrefix, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return opts, fmt.Errorf("%w: key prefix %q must not contain whitespace or control characters", ErrInvalid, opts.KeyPrefix)
	}
	opts.PingTimeout = cmp.Or(opts.PingTimeout, 2*time.Second)
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.FenceTTL = cmp.Or(opts.FenceTTL, 10*time.Minute)
	opts.Heartbeat = cmp.Or(opts.Heartbeat, 250*time.Millisecond)
	opts.Liveness = cmp.Or(opts.Liveness, 750*time.Millisecond)
	opts.ClaimTTL = cmp.Or(opts.ClaimTTL, 750*time.Millisecond)
	opts.MaxWaiters = cmp.Or(opts.MaxWaiters, 10000)
	opts.TicketGrace = cmp.Or(opts.TicketGrace, 10*time.Second)
	opts.IdempotencyWindow = cmp.Or(opts.IdempotencyWindow, 10*time.Minute)
	opts.ReplicaAckTimeout = cmp.Or(opts.ReplicaAckTimeout, 500*time.Millisecond)
	opts.LongHold = cmp.Or(opts.LongHold, 10*time.Minute)
	opts.ElectionLog = cmp.Or(opts.ElectionLog, 1000)
	opts.ElectionLogBytes = cmp.Or(opts.ElectionLogBytes, 128<<10)
	opts.ElectionRetention = cmp.Or(opts.ElectionRetention, time.Hour)
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	if opts.OnLongHoldSweep == nil {
		opts.OnLongHoldSweep = func(int, time.Duration) {}
	}
	if opts.OnRedisCheck == nil {
		opts.OnRedisCheck = func(bool) {}
	}
	if opts.MaxHeld < 0 {
		return opts, fmt.Errorf("%w: max held %d must not be negative", ErrInvalid, opts.MaxHeld)
	}
	if opts.ReplicaAcks < 0 {
		return opts, fmt.Errorf("%w: replica acks %d must not be negative", ErrInvalid, opts.ReplicaAcks)
	}
	if opts.ReplicaAcks > 0 && opts.CountReplicas != nil {
		return opts, fmt.Errorf("%w: replica acks are a number or every replica, not both", ErrInvalid)
	}
	if opts.ElectionLog < 1 || opts.ElectionLogBytes < 1 || opts.ElectionRetention < time.Second {
		return opts, fmt.Errorf("%w: an election's log must keep at least 1 entry and 1 byte for at least 1s, got %d, %d bytes for %v", ErrInvalid,
			opts.ElectionLog, opts.ElectionLogBytes, opts.ElectionRetention)
	}
	if opts.Liveness <= opts.Heartbeat {
		return opts, fmt.Errorf("%w: liveness %v must exceed the heartbeat %v", ErrInvalid, opts.Liveness, opts.Heartbeat)
	}
	return opts, nil
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
	s.dep.close()
}

// RenewalFailures counts watchdog renewals that failed (Redis unreachable or erroring) since start.
func (s *Service) RenewalFailures() int64 { return s.watchdog.failures.Load() }

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
	ctx, cancel := context.WithTimeout(ctx, s.cfg.pingTimeout)
	defer cancel()
	return s.dep.ping(ctx)
}

// idem is a request's Idempotency-Key with the window its record is kept for.
func (s *Service) idem(key string) idemKey {
	return idemKey{key: key, window: s.cfg.idemWindow}
}

// observeAcquire tells the observer how an acquire ended.
func (s *Service) observeAcquire(kind string, g *Grant, err error) {
	switch {
	case err != nil:
		s.observeRefusal(kind, err)
	case g.Reentered:
		s.obs.Granted(kind, g.Mode, GrantReentry, 0)
	case g.Waited > 0:
		s.obs.Granted(kind, g.Mode, GrantHandOff, g.Waited)
	default:
		s.obs.Granted(kind, g.Mode, GrantNew, 0)
	}
}

// observeRefusal tells the observer about a 409 or a 410 that err carries.
func (s *Service) observeRefusal(kind string, err error) {
	var held *HeldError
	switch {
	case errors.As(err, &held):
		s.obs.Refused(kind)
		if kind != kindMultiLock {
			s.ledgers.contention.add(Ref{held.Kind, held.Lock}, time.Now())
		}
	case errors.Is(err, ErrLeaseLost):
		s.obs.Lost(kind)
	}
}
