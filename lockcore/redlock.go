package lockcore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// RedLock mode: the Service runs on N (3, 5 or 7) independent Redis masters, and a lock is held
// when a majority of them hold it. Every master runs the very scripts a single Redis runs, with
// the same arguments (a new lease's ID, the gateway's clock for fences and queue places: see
// core.lua), so masters that saw the same calls hold the same state; redlock_quorum.go turns their
// replies into one, by majority. This file holds the masters: reaching all of them at once, and
// the restart guard.
//
// A master that restarted lost its locks (without persistence, or with an AOF whose tail was
// lost), and with them the majority some lease had. Every new connection to a master therefore
// leaves it uncounted until the gateway has asked which Redis process it is (INFO's run_id): a
// process other than the one recorded on the master (or no record: it came back empty) is not
// counted toward any quorum for RestartGuard, which must be at least the largest lease TTL. Any
// lease alive when the master restarted is then gone, or was renewed since by a majority of the
// other masters (renewals made while it is uncounted cannot lean on it), before its vote counts
// again: antirez's "delayed restart", enforced by the gateway rather than left to operators. The
// guard runs on the master's own clock (a key with a TTL), so every gateway replica, including
// one started during it, keeps it alike.

// redlock is the deployment: its masters and what counting their votes needs.
type redlock struct {
	nodes  []*redlockMaster
	quorum int
	guard  time.Duration
	fresh  bool // Options.RedLockNewDeployment

	runner             runner
	log                *slog.Logger
	prefix             string // the key prefix
	chanPrefix         string // + replica ID = a replica's grants channel, on every master
	fenceTTLMs         string
	runIDKey, guardKey string

	ctx    context.Context // ends at close
	cancel context.CancelFunc
	// late counts goroutines of the deployment: calls still out on some master after their
	// caller moved on, checks of masters; close waits for them.
	late sync.WaitGroup
}

// redlockMaster is one of the deployment's Redis masters.
type redlockMaster struct {
	i      int // its place in LEASEGATE_REDLOCK_URLS
	addr   string
	client rueidis.Client
	dials  atomic.Int64 // connections rueidis opened to it, ever

	mu           sync.Mutex
	checkedDials int64         // the dial count when the last check of its process began
	runID        string        // its process, as last checked ("": never checked)
	guardUntil   time.Time     // not counted before then: it restarted (see above)
	checking     chan struct{} // closed when the check under way ends (nil: none)
}

// counts reports whether the master's replies count toward a quorum now: every connection to it
// was opened before a check that found it the process it was, and its guard has run out.
func (m *redlockMaster) counts(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runID != "" && m.checkedDials == m.dials.Load() && !now.Before(m.guardUntil)
}

// countDials wraps a rueidis dialer so that every connection opened to m counts, once it is open
// (before any reply can come over it): a check that began before it cannot vouch for it.
func countDials(m *redlockMaster, dial func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error)) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (conn net.Conn, err error) {
		defer func() {
			if err == nil {
				m.dials.Add(1)
			}
		}()
		switch {
		case dial != nil:
			return dial(ctx, dst, d, cfg)
		case cfg != nil:
			return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", dst)
		}
		return d.DialContext(ctx, "tcp", dst)
	}
}

// start checks every master (a new deployment, where no master carries a record yet, starts
// without guards) and keeps checking those that are not counted, until the deployment closes.
func (rl *redlock) start() {
	ctx, cancel := context.WithTimeout(rl.ctx, 2*time.Second)
	defer cancel()
	recorded, answered := make([]bool, len(rl.nodes)), make([]bool, len(rl.nodes))
	rl.everyMaster(func(i int, m *redlockMaster) {
		n, err := m.client.Do(ctx, m.client.B().Exists().Key(rl.runIDKey).Build()).AsInt64()
		answered[i], recorded[i] = err == nil, n == 1
	})
	// A master without a record lost its data, or is new: nothing tells the two apart, so only
	// an operator who says the deployment is new (Options.RedLockNewDeployment) spares it the guard,
	// and only when no master has a record.
	fresh := rl.fresh && countTrue(answered) >= rl.quorum && countTrue(recorded) == 0
	if fresh {
		rl.log.Warn("new RedLock deployment: its masters are recorded without a restart guard; unset LEASEGATE_REDLOCK_NEW_DEPLOYMENT once it runs")
	}
	rl.everyMaster(func(i int, m *redlockMaster) {
		if answered[i] {
			if err := rl.checkMaster(ctx, m, fresh); err != nil {
				rl.log.Warn("redlock master not checked yet; it counts once it is", "master", m.addr, "err", err)
			}
		}
	})
	rl.late.Go(rl.recheck)
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// everyMaster runs f for every master at once and waits for all.
func (rl *redlock) everyMaster(f func(i int, m *redlockMaster)) {
	var wg sync.WaitGroup
	for i, m := range rl.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, m)
		}()
	}
	wg.Wait()
}

// recheck checks, twice a second, the masters that do not count for want of a check (new
// connections after an outage).
func (rl *redlock) recheck() {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-rl.ctx.Done():
			return
		case <-tick.C:
		}
		for _, m := range rl.nodes {
			m.mu.Lock()
			stale := m.runID == "" || m.checkedDials != m.dials.Load()
			m.mu.Unlock()
			if stale {
				rl.checkSoon(m)
			}
		}
	}
}

// checkSoon checks m on a goroutine of its own, unless a check is under way.
func (rl *redlock) checkSoon(m *redlockMaster) {
	if rl.ctx.Err() != nil {
		return
	}
	rl.late.Add(1)
	go func() {
		defer rl.late.Done()
		rl.checkOnce(m)
	}()
}

// checkOnce checks m, or waits for the check under way to end.
func (rl *redlock) checkOnce(m *redlockMaster) {
	m.mu.Lock()
	if ch := m.checking; ch != nil {
		m.mu.Unlock()
		<-ch
		return
	}
	ch := make(chan struct{})
	m.checking = ch
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rl.ctx), 2*time.Second)
	_ = rl.checkMaster(ctx, m, false)
	cancel()
	m.mu.Lock()
	m.checking = nil
	m.mu.Unlock()
	close(ch)
}

// counts reports whether m's reply, just received, counts toward a quorum: a reply on a
// connection opened since m's last check waits for a check first (rare: rueidis keeps its
// connections), so that a new connection costs a round trip, not a vote.
func (rl *redlock) counts(m *redlockMaster) bool {
	if m.counts(time.Now()) {
		return true
	}
	m.mu.Lock()
	unchecked := m.runID == "" || m.checkedDials != m.dials.Load()
	m.mu.Unlock()
	if !unchecked {
		return false // within its restart guard
	}
	rl.checkOnce(m)
	return m.counts(time.Now())
}

// checkMaster asks m which Redis process it is and records the answer on m (redlock_guard.lua): a
// process other than the recorded one, or no record unless fresh, starts its restart guard. The
// check vouches for the connections opened before it began; it runs again (up to three times)
// while new ones open meanwhile.
func (rl *redlock) checkMaster(ctx context.Context, m *redlockMaster, fresh bool) error {
	for range 3 {
		gen := m.dials.Load()
		info, err := m.client.Do(ctx, m.client.B().Info().Section("server").Build()).ToString()
		if err != nil {
			return err
		}
		runID := infoField(info, "run_id")
		if runID == "" {
			return errors.New("INFO server carries no run_id")
		}
		left, err := rl.runner.run(ctx, m.client, scripts.redlockGuard, []string{rl.runIDKey, rl.guardKey},
			[]string{runID, ms(rl.guard), flag(fresh)}).AsInt64()
		if err != nil {
			return err
		}
		m.mu.Lock()
		was, wasGuarded := m.runID, time.Now().Before(m.guardUntil)
		m.runID, m.checkedDials = runID, gen
		m.guardUntil = time.Now().Add(time.Duration(max(left, 0)) * time.Millisecond)
		m.mu.Unlock()
		if left > 0 && (!wasGuarded || was != runID) {
			rl.log.Warn("redlock master restarted: not counted toward any quorum until its guard runs out",
				"master", m.addr, "run_id", runID, "guard_s", (time.Duration(left) * time.Millisecond).Seconds())
		}
		if m.dials.Load() == gen {
			return nil
		}
	}
	return nil
}

// infoField reads field from an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// close stops the checks, closes the masters' clients and waits for the calls still out.
func (rl *redlock) close() {
	rl.cancel()
	rl.closeClients()
	rl.late.Wait()
}

func (rl *redlock) closeClients() {
	for _, m := range rl.nodes {
		if m.client != nil {
			m.client.Close()
		}
	}
}

// ping reports whether a majority of counted masters answer.
func (rl *redlock) ping(ctx context.Context) error {
	up := atomic.Int64{}
	rl.everyMaster(func(_ int, m *redlockMaster) {
		if m.client.Do(ctx, m.client.B().Ping().Build()).Error() == nil && rl.counts(m) {
			up.Add(1)
		}
	})
	if n := up.Load(); int(n) < rl.quorum {
		return fmt.Errorf("%w: %d of %d RedLock masters answer and count, %d needed", ErrUnavailable, n, len(rl.nodes), rl.quorum)
	}
	return nil
}

// MasterState is one RedLock master as Masters saw it.
type MasterState struct {
	Addr      string
	Counts    bool
	GuardLeft time.Duration
}

// The deployment's shape (see deployment.go): every master a full copy of the locks.

func (rl *redlock) copies() []rueidis.Client {
	out := make([]rueidis.Client, len(rl.nodes))
	for i, m := range rl.nodes {
		out[i] = m.client
	}
	return out
}

// live returns the masters that count now: a master down, or restarted, may have lost its copy.
func (rl *redlock) live() []rueidis.Client {
	var out []rueidis.Client
	now := time.Now()
	for _, m := range rl.nodes {
		if m.counts(now) {
			out = append(out, m.client)
		}
	}
	return out
}

func (rl *redlock) masters(context.Context) ([]rueidis.Client, error) { return rl.copies(), nil }

// handOffs: a waiter confirms once a majority of masters handed it the lock (see wait.go).
func (rl *redlock) handOffs() int { return rl.quorum }

// handsOver is false: a waiter takes the lock once a majority of masters handed it over.
func (rl *redlock) handsOver() bool { return false }

// validity is ttl less the drift allowance (the time the grant took is counted from its start).
func (rl *redlock) validity(ttl time.Duration) time.Duration { return ttl - drift(ttl) }

// clock is the gateway's, in µs, for fences and queue places the same on every master (core.lua).
func (rl *redlock) clock() string { return strconv.FormatInt(time.Now().UnixMicro(), 10) }

// offers: what a majority of masters cannot bound, or would need a quorum of its own, is not
// offered (see redlock_quorum.go).
func (rl *redlock) offers(f feature) error {
	switch f {
	case featureSemaphores:
		return notSupported(f, "RedLock", "a majority per permit does not bound the holders by the permits")
	case featureElections:
		return notSupported(f, "RedLock", "an election's log of leaders would need the masters to agree on its order")
	case featureMultiLocks, featureEvents, featureListing, featureHeldQuota, featureLongHolds, featureAcks, featureKeyReuse:
		return notSupported(f, "RedLock", "")
	}
	return nil
}

func (rl *redlock) grants(string) string { return rl.chanPrefix }

// listen subscribes to this replica's grants channel on every master: each hands locks on.
func (rl *redlock) releaseFeed(string) (feed, bool) { return feed{}, false }

func (rl *redlock) listen(l listener) {
	for i, m := range rl.nodes {
		l.follow(feed{client: m.client, channel: rl.chanPrefix + l.replicaID(), from: i + 1}, nil)
	}
}

func (rl *redlock) ready(listener, string) <-chan struct{} { return closedChan }
func (rl *redlock) slot(string) int                        { return 0 }
func (rl *redlock) fences(lockKey string) string           { return slotFences(rl.prefix, lockKey) }
func (rl *redlock) shards() int                            { return 1 }

// masterReply is one master's answer to a call sent to all of them.
type masterReply struct {
	m       *redlockMaster
	res     rueidis.RedisResult
	counted bool // it answered without error and counts (see master.counts)
}

// fanout is one call sent to every master; replies come in as they arrive.
type fanout struct {
	rl      *redlock
	ch      chan masterReply
	pending int
}

// send runs c on every master at once. The calls are detached from ctx's cancellation (see
// deployment.run); each is bounded by its client's write timeout.
func (rl *redlock) send(ctx context.Context, c call) *fanout {
	f := &fanout{rl: rl, ch: make(chan masterReply, len(rl.nodes)), pending: len(rl.nodes)}
	ctx = context.WithoutCancel(ctx)
	for _, m := range rl.nodes {
		rl.late.Add(1)
		go func() {
			defer rl.late.Done()
			r := masterReply{m: m, res: rl.runner.run(ctx, m.client, c.script, c.keys, c.args)}
			switch err := r.res.Error(); {
			case err == nil:
				r.counted = rl.counts(m)
			case !rueidis.IsRedisNil(err):
				rl.checkSoon(m) // a new connection will open: check it as soon as it does
			}
			f.ch <- r
		}()
	}
	return f
}

// collect gathers replies until done says they are enough, every master answered, or deadline
// passes (zero: no deadline). A reply counts if its master counts when it arrives (see counts).
func (f *fanout) collect(deadline time.Time, done func(got []masterReply, pending int) bool) []masterReply {
	var got []masterReply
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	for f.pending > 0 && !done(got, f.pending) {
		select {
		case r := <-f.ch:
			f.pending--
			got = append(got, r)
		case <-timeout:
			return got
		}
	}
	return got
}

// rest hands the replies still to come to handle (nil: drop them), on a goroutine of its own.
func (f *fanout) rest(handle func(masterReply)) {
	n := f.pending
	f.pending = 0
	if n == 0 {
		return
	}
	f.rl.late.Add(1)
	go func() {
		defer f.rl.late.Done()
		for range n {
			r := <-f.ch
			if handle != nil && r.res.Error() == nil {
				handle(r)
			}
		}
	}()
}

var zeroTime time.Time

// drift is the clock-drift allowance RedLock takes off a lease's validity: 1% of its TTL plus
// 2 ms (the RedLock description's, and redsync's, figures).
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// NewRedLock returns a Service whose locks live on a majority of the independent Redis masters
// that masters describe (3, 5 or 7 of them; each a single Redis, see ClientOption). A restarted
// master is not counted for opts.RestartGuard, which must be at least the largest TTL a lease can
// have. It checks every master that answers before it returns; the others are checked when they do.
func NewRedLock(masters []rueidis.ClientOption, tokens *Tokens, opts Options) (*Service, error) {
	if n := len(masters); n != 3 && n != 5 && n != 7 {
		return nil, fmt.Errorf("%w: RedLock takes 3, 5 or 7 masters, got %d", ErrInvalid, n)
	}
	if opts.RestartGuard <= 0 {
		return nil, fmt.Errorf("%w: RedLock needs a restart guard (at least the largest lease TTL)", ErrInvalid)
	}
	if opts.MaxHeld > 0 {
		return nil, fmt.Errorf("%w: the cap on held leases is not offered on RedLock (its count would need a quorum of its own)", ErrInvalid)
	}
	if opts.ReplicaAcks > 0 || opts.CountReplicas != nil {
		return nil, fmt.Errorf("%w: replica acks do not apply to RedLock's independent masters", ErrInvalid)
	}
	if err := opts.Redisson.offeredOnRedLock(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	rl := &redlock{quorum: len(masters)/2 + 1, guard: opts.RestartGuard, fresh: opts.RedLockNewDeployment,
		runner: runner{obs: opts.Observer}, log: opts.Logger, prefix: opts.KeyPrefix, chanPrefix: opts.KeyPrefix + "grants:", fenceTTLMs: ms(opts.FenceTTL),
		runIDKey: opts.KeyPrefix + "redlock:run_id", guardKey: opts.KeyPrefix + "redlock:guard"}
	rl.ctx, rl.cancel = context.WithCancel(context.Background())
	for i, o := range masters {
		m := &redlockMaster{i: i, addr: strings.Join(o.InitAddress, ",")}
		o.DialCtxFn = countDials(m, o.DialCtxFn)
		c, err := rueidis.NewClient(o)
		if err != nil {
			rl.closeClients()
			return nil, fmt.Errorf("redlock master %s: %w", m.addr, err)
		}
		m.client = c
		rl.nodes = append(rl.nodes, m)
	}
	rl.start()
	return newService(rl, tokens, opts), nil
}

// Masters reports, on RedLock, each master's address and whether its votes count now (false while
// it is down, unchecked or within its restart guard); nil otherwise.
func (s *Service) Masters() []MasterState {
	rl, ok := s.dep.(*redlock)
	if !ok {
		return nil
	}
	out := make([]MasterState, len(rl.nodes))
	now := time.Now()
	for i, m := range rl.nodes {
		m.mu.Lock()
		guard := max(m.guardUntil.Sub(now), 0)
		m.mu.Unlock()
		out[i] = MasterState{Addr: m.addr, Counts: m.counts(now), GuardLeft: guard}
	}
	return out
}
