package tests

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/tests/harness"
)

// The fault checker, in the spirit of Jepsen's lock analyses: gateway replicas and clients on a
// real Redis, a workload of long-polls, renewals, re-entries, watchdog leases and abandoned waits,
// faults on a schedule, and a check of the whole history at the end (faultcheck_history_test.go).
// CI runs a bounded mix; for longer runs:
//
//	go test ./tests -run TestFaultCheck -count=1 -faultcheck.duration=10m
//	go test ./tests -run TestFaultCheck -count=1 -faultcheck.binary=/path/to/other/leasegate
var (
	faultDuration = flag.Duration("faultcheck.duration", 25*time.Second, "how long each fault-check run injects faults")
	faultBinary   = flag.String("faultcheck.binary", "", "a gateway binary to check instead of this tree's (e.g. a deliberately broken build)")
)

// TestFaultCheck runs the checker against a standalone Redis with AOF on (restarts keep the data)
// and with persistence off (restarts lose every lock: leases lost that way must be found out by
// their holders, never overlap while they believe they hold).
func TestFaultCheck(t *testing.T) {
	for _, aof := range []bool{true, false} {
		t.Run(fmt.Sprintf("aof=%v", aof), func(t *testing.T) {
			t.Parallel()
			args := []string{"--appendonly", "no"}
			if aof {
				args = []string{"--appendonly", "yes", "--appendfsync", "always"}
			}
			r := harness.NewRedis(t, harness.RedisOptions{Args: args})
			fc := newFaultCheck(t, standaloneRedis{r}, nil)
			fc.run(*faultDuration)
			fc.check(aof)
		})
	}
	// Sentinel with replica acks: a crash of the master is a failover. Only leases whose release
	// answered 200 count as having stayed valid (a failover may lose a release or the last
	// grants' neighbours), as without persistence.
	t.Run("sentinel,acks=1", func(t *testing.T) {
		t.Parallel()
		rig := harness.NewSentinelRig(t, harness.SentinelOptions{})
		fc := newFaultCheck(t, sentinelRedis{t, rig}, map[string]string{"LEASEGATE_REDIS_URL": rig.URL(), "LEASEGATE_REPLICA_ACKS": "1"})
		fc.run(*faultDuration)
		fc.check(false)
	})
	// Redis Cluster: a crash is a master's failover (its slots move to its replica, the old master
	// comes back as a replica); slot migrations of the checked locks come on top.
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		rig := harness.NewClusterRig(t, harness.ClusterOptions{})
		fc := newFaultCheck(t, &clusterRedis{t: t, rig: rig}, map[string]string{"LEASEGATE_REDIS_URL": rig.URL()})
		fc.run(*faultDuration)
		fc.check(false)
	})
}

type clusterRedis struct {
	t   *testing.T
	rig *harness.ClusterRig
	n   int
}

// master returns the masters in turn.
func (c *clusterRedis) master() *harness.Redis {
	ms := c.rig.Masters()
	c.n++
	return ms[c.n%len(ms)]
}
func (c *clusterRedis) gatewayRedis() *harness.Redis { return nil }

// crash kills a master, waits for its replica to take over, and restarts it (as a replica).
func (c *clusterRedis) crash() error {
	old := c.master()
	if err := c.rig.KillMaster(old.Addr); err != nil {
		return err
	}
	if _, err := c.rig.AwaitFailover(failoverWithin); err != nil {
		return err
	}
	return old.Restart()
}

// migrate moves the slot of lock (its keys and all) to another master.
func (c *clusterRedis) migrate(prefix, lock string) error {
	slot := harness.KeySlot(prefix + "{" + lock + "}")
	from := c.rig.NodeForSlot(slot)
	for _, m := range c.rig.Masters() {
		if m.Addr != from.Addr {
			return c.rig.MigrateSlot(slot, from, m)
		}
	}
	return nil
}

// faultRedis is the Redis deployment under a fault check.
type faultRedis interface {
	master() *harness.Redis // where CLIENT KILL, DEBUG SLEEP and CLIENT PAUSE go
	crash() error           // kill -9 of the (master) server, and its return
	gatewayRedis() *harness.Redis
}

type standaloneRedis struct{ r *harness.Redis }

func (s standaloneRedis) master() *harness.Redis       { return s.r }
func (s standaloneRedis) gatewayRedis() *harness.Redis { return s.r }
func (s standaloneRedis) crash() error {
	_ = s.r.Kill()
	return s.r.Restart()
}

type sentinelRedis struct {
	t   *testing.T
	rig *harness.SentinelRig
}

func (s sentinelRedis) master() *harness.Redis       { return s.rig.Master() }
func (s sentinelRedis) gatewayRedis() *harness.Redis { return nil }

// crash kills the master, waits for the failover, and restarts the old master, which the
// sentinels turn into a replica of the new one.
func (s sentinelRedis) crash() error {
	old := s.rig.Master()
	if err := s.rig.KillMaster(); err != nil {
		return err
	}
	if _, err := s.rig.AwaitFailover(failoverWithin); err != nil {
		return err
	}
	return old.Restart()
}

// faultCheck is one run: its Redis, its gateway replicas (replaced as faults kill them), its
// clients' history.
type faultCheck struct {
	t      *testing.T
	redis  faultRedis
	env    map[string]string // the gateways' extra environment
	prefix string
	locks  []string

	mu       sync.Mutex
	gateways []*harness.Gateway
	clients  []*harness.Client

	h      history
	faults []string // what was injected, when
}

const faultReplicas = 3

// faultRecovery is how long after a fault ends the liveness check leaves the system to recover:
// reconnections, a dead replica's waiters ageing out of line (0.75 s), re-queueing.
const faultRecovery = 1500 * time.Millisecond

func newFaultCheck(t *testing.T, r faultRedis, env map[string]string) *faultCheck {
	fc := &faultCheck{t: t, redis: r, env: env, prefix: harness.RandomPrefix(), locks: []string{"fc-a", "fc-b", "fc-c"}}
	for range faultReplicas {
		fc.addGateway()
	}
	t.Cleanup(func() {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		var wg sync.WaitGroup
		for _, g := range fc.gateways {
			wg.Go(func() { _ = g.Stop() })
		}
		wg.Wait()
	})
	return fc
}

// addGateway starts one more replica on the shared prefix.
func (fc *faultCheck) addGateway() {
	env := map[string]string{"LEASEGATE_LOG_LEVEL": "warn"}
	for k, v := range fc.env {
		env[k] = v
	}
	g, err := harness.StartGateway(fc.t.TempDir(), harness.GatewayOptions{Redis: fc.redis.gatewayRedis(), KeyPrefix: fc.prefix, Binary: *faultBinary, Env: env})
	require.NoError(fc.t, err)
	fc.mu.Lock()
	fc.gateways = append(fc.gateways, g)
	fc.clients = append(fc.clients, harness.NewClient(fc.t, g.URL))
	fc.mu.Unlock()
}

// client returns some live replica's client.
func (fc *faultCheck) client(rng *rand.Rand) *harness.Client {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.clients[rng.IntN(len(fc.clients))]
}

// run drives the workload for d with a fault every 1-2.5 s, then stops the faults, lets the
// clients finish what they hold, and stops them.
func (fc *faultCheck) run(d time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() { fc.worker(i, stop) })
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	deadline := time.Now().Add(d)
	tick := time.NewTimer(time.Second)
	for time.Now().Before(deadline) {
		<-tick.C // the fault schedule's pace, not synchronisation
		start := time.Now()
		fc.inject(rng)
		fc.h.fault(start, time.Now().Add(faultRecovery))
		tick.Reset(time.Second + time.Duration(rng.IntN(1500))*time.Millisecond)
	}
	tick.Stop()
	fc.note("faults stop")
	// The workload goes on a while on a quiet system, so that every wait can be answered.
	quiet := time.NewTimer(3 * time.Second)
	<-quiet.C
	close(stop)
	wg.Wait()
}

func (fc *faultCheck) note(what string) {
	fc.mu.Lock()
	fc.faults = append(fc.faults, time.Now().Format("15:04:05.000")+" "+what)
	fc.mu.Unlock()
}

// inject applies one fault, picked at random, and waits until the system is whole again (every
// fault ends: killed processes are replaced or restarted).
func (fc *faultCheck) inject(rng *rand.Rand) {
	if mg, ok := fc.redis.(interface {
		migrate(prefix, lock string) error
	}); ok && rng.IntN(6) == 0 {
		lock := fc.locks[rng.IntN(len(fc.locks))]
		fc.note("migrate the slot of " + lock)
		require.NoError(fc.t, mg.migrate(fc.prefix, lock))
		return
	}
	switch rng.IntN(7) {
	case 0, 1: // a replica dies (kill -9) or stops (SIGTERM), and a new one starts
		fc.mu.Lock()
		i := rng.IntN(len(fc.gateways))
		g := fc.gateways[i]
		fc.gateways = append(fc.gateways[:i:i], fc.gateways[i+1:]...)
		fc.clients = append(fc.clients[:i:i], fc.clients[i+1:]...)
		fc.mu.Unlock()
		if rng.IntN(2) == 0 {
			fc.note("kill -9 gateway " + g.URL)
			_ = g.Kill()
		} else {
			fc.note("SIGTERM gateway " + g.URL)
			_ = g.Stop()
		}
		fc.addGateway()
	case 2: // Redis crashes and restarts
		fc.note("kill -9 of redis (the master), and its return")
		require.NoError(fc.t, fc.redis.crash())
	case 3:
		fc.note("CLIENT KILL TYPE pubsub")
		_, _ = fc.redis.master().Do("CLIENT", "KILL", "TYPE", "pubsub")
	case 4:
		fc.note("CLIENT KILL TYPE normal")
		_, _ = fc.redis.master().Do("CLIENT", "KILL", "TYPE", "normal")
	case 5:
		fc.note("DEBUG SLEEP 0.8")
		_, _ = fc.redis.master().Do("DEBUG", "SLEEP", "0.8")
	case 6:
		fc.note("CLIENT PAUSE 800")
		_, _ = fc.redis.master().Do("CLIENT", "PAUSE", "800", "ALL")
	}
}

// worker is one client: over and over it waits for a lock (or abandons the wait), works under it
// (writing to the fenced store), renews, re-enters, and releases, or lets a lease run out.
func (fc *faultCheck) worker(i int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		lock := fc.locks[rng.IntN(len(fc.locks))]
		owner := fmt.Sprintf("c%02d-%d", i, k)
		ttl, watchdog := 1200*time.Millisecond, rng.IntN(5) == 0
		if watchdog {
			ttl = 900 * time.Millisecond
		}
		const wait = 3 * time.Second
		ctx, cancel := context.WithCancel(context.Background())
		abandon := rng.IntN(8) == 0
		if abandon {
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(50+rng.IntN(800))*time.Millisecond)
		}
		body := fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d}`, owner, ttl.Milliseconds(), wait.Milliseconds())
		if watchdog { // bounded, so that a lease whose release never got through is freed soon
			body = fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d,"watchdog":true,"max_hold_ms":5000}`, owner, ttl.Milliseconds(), wait.Milliseconds())
		}
		c := fc.client(rng)
		sent := time.Now()
		r, err := c.Send(ctx, http.MethodPost, "/locks/"+lock, nil, body)
		answered := time.Now()
		cancel()
		if err == nil && r.Status != http.StatusCreated {
			fc.h.wait(lock, owner, sent, answered, wait, r.Status)
		}
		if err != nil || r.Status != http.StatusCreated {
			continue
		}
		fc.h.wait(lock, owner, sent, answered, wait, r.Status)
		l := &held{lock: lock, owner: owner, fence: r.Int("fence"), token: r.Str("token"), sent: sent, answered: answered,
			validUntil: sent.Add(ttl), watchdog: watchdog}
		fc.hold(rng, c, l, ttl)
		fc.h.add(l)
	}
}

// hold works under l: a few writes to the fenced store, renewals and maybe a re-entry, then a
// release (or, now and then, nothing: the lease runs out).
func (fc *faultCheck) hold(rng *rand.Rand, c *harness.Client, l *held, ttl time.Duration) {
	ctx := context.Background()
	holds := 1
	for step := range 1 + rng.IntN(4) {
		if !l.valid(time.Now()) {
			break // the client stops work before its lease can lapse
		}
		fc.h.write(l, time.Now())
		switch rng.IntN(4) {
		case 0:
			t0 := time.Now()
			r, err := c.Send(ctx, http.MethodPost, "/locks/"+l.lock+"/renew", tokenHeader(l.token), "")
			switch {
			case err == nil && r.Status == http.StatusOK:
				l.validUntil = t0.Add(ttl)
			case err == nil && r.Status == http.StatusGone:
				l.lost(time.Now(), "renew 410")
				return
			}
		case 1:
			if step == 0 {
				t0 := time.Now()
				body := fmt.Sprintf(`{"owner":%q,"ttl_ms":%d}`, l.owner, ttl.Milliseconds())
				r, err := c.Send(ctx, http.MethodPost, "/locks/"+l.lock, harness.Headers{"Lease-Token": l.token, "Idempotency-Key": l.owner + "-re"}, body)
				switch {
				case err == nil && r.Status == http.StatusOK:
					holds++
					l.validUntil = t0.Add(ttl)
				case err == nil && r.Status == http.StatusGone:
					l.lost(time.Now(), "re-entry 410")
					return
				}
			}
		}
		pause := time.NewTimer(time.Duration(rng.IntN(150)) * time.Millisecond)
		<-pause.C // the work's duration
	}
	if rng.IntN(10) == 0 && !l.watchdog {
		l.released = l.validUntil // abandoned: it runs out
		return
	}
	for h := range holds {
		l.releaseSent = time.Now()
		// A release is retried with its Idempotency-Key (on any replica) while the answer is lost
		// or 503, as the SDKs do, for a few seconds.
		headers := harness.Headers{"Lease-Token": l.token, "Idempotency-Key": fmt.Sprintf("%s-rel-%d", l.owner, h)}
		r, err := c.Send(ctx, http.MethodDelete, "/locks/"+l.lock, headers, "")
		for try := 0; try < 20 && (err != nil || r.Status == http.StatusServiceUnavailable); try++ {
			pause := time.NewTimer(250 * time.Millisecond)
			<-pause.C // retry back-off
			r, err = fc.client(rng).Send(ctx, http.MethodDelete, "/locks/"+l.lock, headers, "")
		}
		switch {
		case err == nil && r.Status == http.StatusGone:
			l.lost(time.Now(), "release 410")
			return
		case err != nil || r.Status != http.StatusOK:
			l.released = l.validUntil // outcome unknown: count it held until it could lapse
			if l.watchdog {
				l.unknown = true
			}
			return
		}
	}
	l.released, l.confirmed = l.releaseSent, true
}

// check runs the history checks, then waits for the system to settle: every lock free, every
// queue empty.
func (fc *faultCheck) check(persistent bool) {
	t := fc.t
	t.Logf("faults injected:\n  %s", strings.Join(fc.faults, "\n  "))
	fc.h.check(t, persistent)
	c := fc.client(rand.New(rand.NewPCG(1, 2)))
	for _, lock := range fc.locks {
		var last string
		deadline := time.Now().Add(15 * time.Second) // a watchdog lease's max hold (5 s) and TTL, and slack
		for {
			r, err := c.Send(context.Background(), http.MethodGet, "/locks/"+lock, nil, "")
			if err == nil && r.Status == http.StatusOK && r.JSON()["held"] == false && r.Int("waiters") == 0 {
				break
			}
			if err == nil {
				last = string(r.Body)
			}
			if time.Now().After(deadline) {
				t.Errorf("%s not free with nobody waiting 15 s after the workload stopped: %s", lock, last)
				break
			}
			poll := time.NewTimer(100 * time.Millisecond)
			<-poll.C // polling back-off
		}
	}
}
