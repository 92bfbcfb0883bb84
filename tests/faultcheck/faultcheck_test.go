package faultcheck

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// The fault checker, in the spirit of Jepsen's lock analyses: gateway replicas and clients on a
// real Redis deployment, a workload of long-polls, renewals, re-entries, watchdog leases and
// abandoned waits, faults on a schedule, and a check of the whole history at the end
// (history_test.go) against what the deployment promises. The deployments, their faults and
// their promises are one table, faultModes. CI runs a short run of each; for longer runs
// (docs/faultcheck.md):
//
//	go test ./tests/faultcheck -run TestFaultCheck -count=1 -v -faultcheck.duration=10m
//	go test ./tests/faultcheck -run TestFaultCheck -count=1 -v -faultcheck.modes=sentinel-acks-all,redlock
//	go test ./tests/faultcheck -run TestFaultCheck -count=1 -faultcheck.binary=/path/to/other/leasegate
var (
	faultDuration = flag.Duration("faultcheck.duration", 15*time.Second, "how long each fault-check run injects faults")
	faultBinary   = flag.String("faultcheck.binary", "", "a gateway binary to check instead of this tree's (e.g. a deliberately broken build)")
	faultModeList = flag.String("faultcheck.modes", "", "comma-separated fault-check modes to run (e.g. sentinel-acks-all,redlock); all when empty")
	faultRedisson = flag.Int("faultcheck.redisson", 2, "Redisson-protocol clients taking the checked locks beside the gateway's (every mode but redlock; 0: none)")
	faultKinds    = flag.String("faultcheck.faults", "", "comma-separated kinds of fault to inject (e.g. \"SENTINEL FAILOVER,master kill -9 (failover)\"); all of the mode's when empty")
)

// TestFaultCheck runs the checker on every mode of faultModes (or those -faultcheck.modes names),
// all at once (as many as -parallel lets run).
func TestFaultCheck(t *testing.T) {
	var names []string
	for _, m := range faultModes {
		names = append(names, m.name)
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*faultModeList, ",") {
		if n = strings.TrimSpace(n); n != "" {
			require.Contains(t, names, n, "-faultcheck.modes names an unknown mode")
			want[n] = true
		}
	}
	for _, m := range faultModes {
		if len(want) > 0 && !want[m.name] {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := m.deploy(t)
			fc := newFaultCheck(t, m, d)
			fc.run(*faultDuration)
			fc.check(start)
		})
	}
}

// promise is what a deployment promises about answered grants; it picks the history check
// (history.check in history_test.go).
type promise int

const (
	// keepsGrants: every answered grant survives the mode's faults. A lease ends only when its
	// holder ends it or when it may lapse by the client's own reckoning (its TTL counted from its
	// last answered grant, renewal or re-entry request; a watchdog lease's max hold). A 410 before
	// then is a violation, a lost lease, unless history.excuse names a documented cause. Mutual
	// exclusion holds over every lease not lost.
	keepsGrants promise = iota
	// mayLoseGrants: a fault may lose grants the clients were told about (a restart without
	// persistence, a failover to a replica that lacked them, an old master taking writes beside
	// the new one). Lost leases are counted, not violations; mutual exclusion holds over the
	// leases known to have stayed valid: their release answered 200, and they were not held while
	// two masters took writes (a 200 from an old master proves nothing).
	mayLoseGrants
)

func (p promise) String() string {
	if p == keepsGrants {
		return "keeps every answered grant"
	}
	return "may lose grants in faults"
}

// sentinelSafeAcks is LEASEGATE_REPLICA_ACKS for the Sentinel mode that keeps every answered
// grant: every replica the deployment knows (the rig has two).
const sentinelSafeAcks = "all"

// faultModes is every deployment the checker runs and what it promises: the one place that says
// which check applies where. Each deployment's faults are in its function below, besides
// gatewayFaults, which every mode has.
var faultModes = []faultMode{
	{name: "standalone-aof", promise: keepsGrants, deploy: standaloneDeployment(true),
		why: "AOF with appendfsync always: a restart keeps every write that was answered"},
	{name: "standalone-no-aof", promise: mayLoseGrants, deploy: standaloneDeployment(false),
		why: "no persistence: a restart wipes every lock"},
	{name: "sentinel-acks-0", promise: mayLoseGrants, deploy: sentinelDeployment("0"),
		why: "asynchronous replication: a failover loses what the promoted replica had not received, " +
			"and an old master that lives on takes writes until the sentinels demote it"},
	{name: "sentinel-acks-1", promise: mayLoseGrants, deploy: sentinelDeployment("1"),
		why: "one replica's acknowledgement: the promoted replica may lack the grant, and an old master " +
			"that lives on keeps a replica to acknowledge its writes until the sentinels demote it"},
	{name: "sentinel-acks-all", promise: keepsGrants, deploy: sentinelDeployment(sentinelSafeAcks),
		why: "every replica acknowledges each grant, so whichever is promoted has it, " +
			"and an old master cut off from one can acknowledge nothing"},
	{name: "cluster-acks-0", promise: mayLoseGrants, deploy: clusterDeployment("0"),
		why: "asynchronous replication: a master's failover loses what its replica had not received"},
	{name: "cluster-acks-1", promise: keepsGrants, deploy: clusterDeployment("1"),
		why: "each master's one replica (1 is every replica here) acknowledges each grant, so the replica " +
			"promoted has it; a slot migration moves keys with their TTLs"},
	{name: "redlock", promise: keepsGrants, deploy: redlockDeployment,
		why: "a grant holds on a majority of 5 masters, at most 2 are down or restarted at once, " +
			"and a restarted master counts only once every lease it held could have run out"},
}

// faultMode is one row of faultModes: a deployment, its faults, and what it promises.
type faultMode struct {
	name    string
	promise promise
	why     string // why the deployment makes (or cannot make) that promise
	deploy  func(t *testing.T) *deployment
}

// deployment is a Redis deployment under a fault check: how gateways reach it and its faults.
type deployment struct {
	gateway  harness.GatewayOptions // Redis or RedisURL, and Env; KeyPrefix is the check's
	firstEnv map[string]string      // added for the replicas started at the beginning only
	faults   []fault                // its own faults; every mode adds gatewayFaults
	// quorum is, on RedLock, the masters a grant needs: a lease lost after that many masters were
	// restarted, down or stalled in its lifetime lost its majority as docs/redlock.md documents.
	quorum int
}

// fault is one kind of fault, picked with probability weight/total. inject applies it and returns
// once the system is whole again (killed processes restarted, failovers over, replicas in sync);
// it records outages (fc.outage) and, on RedLock, disturbed masters (fc.disturbed).
type fault struct {
	kind   string
	weight int
	inject func(fc *faultCheck, rng *rand.Rand) error
}

// Bounds of the faults' own waits on this loaded machine: a failover (down-after or the node
// timeout, the election, the promotion), and the rig settling after a fault (an old master
// demoted, replicas in full sync again).
const (
	faultFailoverWithin = 30 * time.Second
	settleWithin        = 40 * time.Second
)

// Lease shapes of the workload.
const (
	leaseTTL    = 1200 * time.Millisecond
	watchdogTTL = 2 * time.Second // a renewal every 667 ms: outlives the standalone stalls of 0.8 s
	maxHold     = 5 * time.Second // a watchdog lease's max_hold_ms, so that one whose release failed is freed soon
	waitFor     = 3 * time.Second // every acquire's wait_ms
)

// redisFaults are the faults every deployment takes on a server where picks (holding a checked
// faultCheck is one run: its deployment, its gateway replicas (replaced as faults kill them),
// its clients' history.
type faultCheck struct {
	t      *testing.T
	mode   faultMode
	d      *deployment
	prefix string
	locks  []string
	faults []fault // the deployment's and the gateways'

	mu       sync.Mutex
	gateways []*harness.Gateway // live replicas, in step with clients
	clients  []*harness.Client
	all      []*harness.Gateway // every replica ever started, to check each for a crash
	crashes  map[*harness.Gateway]bool
	notes    []string // what was injected, when

	h history
	// redisson: the gateways share the checked locks with Redisson's clients, and some of the
	// workload's clients are Redisson's (redisson_workload_test.go).
	redisson bool
	// obs is the election's observer (elections_test.go); nil without an election.
	obs *observer
}

const faultReplicas = 3

// faultRecovery is how long after a fault ends the liveness check leaves the system to recover:
// reconnections, a dead replica's waiters ageing out of line (0.75 s), re-queueing.
const faultRecovery = 1500 * time.Millisecond

func newFaultCheck(t *testing.T, m faultMode, d *deployment) *faultCheck {
	fc := &faultCheck{t: t, mode: m, d: d, prefix: harness.RandomPrefix(), locks: []string{"fc-a", "fc-b", "fc-c"},
		faults: pickFaults(t, append(slices.Clone(d.faults), gatewayFaults...)), crashes: map[*harness.Gateway]bool{}}
	if d.quorum == 0 { // RedLock offers no elections, nor locks shared with Redisson
		fc.locks = append(fc.locks, electionPrefix+"fc-e")
		fc.redisson = *faultRedisson > 0
	}
	t.Cleanup(func() {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		var wg sync.WaitGroup
		for _, g := range fc.all {
			wg.Go(func() { _ = g.Stop() })
		}
		wg.Wait()
	})
	for range faultReplicas {
		g, err := fc.startGateway(d.firstEnv)
		require.NoError(t, err)
		fc.mu.Lock()
		fc.gateways, fc.clients = append(fc.gateways, g), append(fc.clients, harness.NewClient(t, g.URL))
		fc.mu.Unlock()
	}
	return fc
}

// pickFaults keeps the faults whose kinds -faultcheck.faults names (all when it is empty); it
// fails t when it names a kind the mode does not have.
func pickFaults(t *testing.T, all []fault) []fault {
	if *faultKinds == "" {
		return all
	}
	var kept []fault
	for _, k := range strings.Split(*faultKinds, ",") {
		i := slices.IndexFunc(all, func(f fault) bool { return f.kind == strings.TrimSpace(k) })
		require.GreaterOrEqual(t, i, 0, "-faultcheck.faults names %q, which this mode does not inject", k)
		kept = append(kept, all[i])
	}
	return kept
}

// startGateway starts one more replica on the check's prefix, with extra environment added.
func (fc *faultCheck) startGateway(extra map[string]string) (*harness.Gateway, error) {
	opts := fc.d.gateway
	opts.KeyPrefix, opts.Binary = fc.prefix, *faultBinary
	// The election's log keeps the whole run, for the check of every leader in it.
	opts.Env = map[string]string{"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_ELECTION_LOG": "1000000"}
	if fc.redisson {
		opts.Env["LEASEGATE_REDISSON_LOCKS"] = redissonPrefix
	}
	for _, env := range []map[string]string{fc.d.gateway.Env, extra} {
		for k, v := range env {
			opts.Env[k] = v
		}
	}
	g, err := harness.StartGateway(fc.t.TempDir(), opts)
	if err != nil {
		return nil, err
	}
	fc.mu.Lock()
	fc.all = append(fc.all, g)
	fc.mu.Unlock()
	return g, nil
}

// replace takes g out of the live replicas (a no-op if it is no longer there), lets stop end it
// (nil: it is gone already) and starts a replica in its place. Safe on any goroutine.
func (fc *faultCheck) replace(g *harness.Gateway, stop func(*harness.Gateway)) error {
	fc.mu.Lock()
	i := slices.Index(fc.gateways, g)
	if i >= 0 {
		fc.gateways = slices.Delete(fc.gateways, i, i+1)
		fc.clients = slices.Delete(fc.clients, i, i+1)
	}
	fc.mu.Unlock()
	if i < 0 {
		return nil
	}
	if stop != nil {
		stop(g)
	}
	n, err := fc.startGateway(nil)
	if err != nil {
		return fmt.Errorf("replacing gateway %s: %w", g.URL, err)
	}
	c := harness.NewClient(fc.t, n.URL)
	fc.mu.Lock()
	fc.gateways, fc.clients = append(fc.gateways, n), append(fc.clients, c)
	fc.mu.Unlock()
	return nil
}

// client returns some live replica's client.
func (fc *faultCheck) client(rng *rand.Rand) *harness.Client {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.clients[rng.IntN(len(fc.clients))]
}

// send is c.Send, counted in the history.
func (fc *faultCheck) send(ctx context.Context, c *harness.Client, method, path string, h harness.Headers, body string) (*harness.Response, error) {
	start := time.Now()
	r, err := c.Send(ctx, method, path, h, body)
	fc.h.sent(method, path, r, err)
	fc.h.trace(start, method, path, h, body, r, err)
	return r, err
}

// run drives the workload for d with a fault every 1-2.5 s, then stops the faults, lets the
// clients finish what they hold, and stops them. A replica that exits on its own meanwhile is
// recorded as a crash and replaced.
func (fc *faultCheck) run(d time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() { fc.worker(i, stop) })
	}
	if fc.redisson {
		c, closeRedisson, err := fc.redissonClient()
		require.NoError(fc.t, err)
		defer closeRedisson()
		for i := range *faultRedisson {
			wg.Go(func() { fc.redissonWorker(i, c, stop) })
		}
	}
	watched := make(chan struct{})
	go func() { defer close(watched); fc.watchCrashes(stop) }()
	if election := fc.election(); election != "" { // it runs on until check has read the log's end
		fc.obs = &observer{stop: make(chan struct{}), done: make(chan struct{})}
		go fc.observe(election, fc.obs)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	total := 0
	for _, f := range fc.faults {
		total += f.weight
	}
	deadline := time.Now().Add(d)
	tick := time.NewTimer(time.Second)
	for time.Now().Before(deadline) {
		<-tick.C // the fault schedule's pace, not synchronisation
		var f fault
		n := rng.IntN(total)
		for _, f = range fc.faults {
			if n < f.weight {
				break
			}
			n -= f.weight
		}
		start := time.Now()
		fc.h.injected(f.kind)
		err := f.inject(fc, rng)
		fc.h.fault(start, time.Now().Add(faultRecovery))
		if err != nil {
			fc.t.Errorf("fault %q: %v", f.kind, err)
			fc.note("injection failed: " + err.Error())
			break
		}
		tick.Reset(time.Second + time.Duration(rng.IntN(1500))*time.Millisecond)
	}
	tick.Stop()
	fc.note("faults stop")
	// The workload goes on a while on a quiet system, so that every wait can be answered.
	quiet := time.NewTimer(3 * time.Second)
	<-quiet.C
	close(stop)
	wg.Wait()
	<-watched
}

// watchCrashes looks at every live replica every 100 ms until stop closes: one that exited on its
// own is a violation (recorded with its log tail) and is replaced so that the run goes on.
func (fc *faultCheck) watchCrashes(stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		fc.mu.Lock()
		live := slices.Clone(fc.gateways)
		fc.mu.Unlock()
		for _, g := range live {
			if crashed, _ := g.Crashed(); crashed {
				fc.crashed(g)
				if err := fc.replace(g, nil); err != nil {
					fc.t.Errorf("%v", err)
				}
			}
		}
	}
}

// crashed records g's crash once.
func (fc *faultCheck) crashed(g *harness.Gateway) {
	_, why := g.Crashed()
	fc.mu.Lock()
	seen := fc.crashes[g]
	fc.crashes[g] = true
	fc.mu.Unlock()
	if !seen {
		fc.note("gateway " + g.URL + " exited on its own")
		fc.h.crash(why)
	}
}

func (fc *faultCheck) note(what string) {
	fc.mu.Lock()
	fc.notes = append(fc.notes, time.Now().Format("15:04:05.000")+" "+what)
	fc.mu.Unlock()
}

// outage records that the deployment (or one master of it) could not serve from..to: a watchdog
// lease may run out in an outage longer than its TTL less its renewal period.
func (fc *faultCheck) outage(from, to time.Time) { fc.h.outage(from, to) }

// disturbed records that RedLock master i was down, within its restart guard, or stalled from
// from to to.
func (fc *faultCheck) disturbed(i int, from, to time.Time) { fc.h.disturb(i, from, to) }

// demoted waits until r, a master just restarted after a kill -9, answers ROLE "slave". A server
// that comes back a master (empty, claiming what it served before) until the sentinels or the
// cluster demote it may take writes from a gateway that has not yet followed the failover: that
// span is recorded as one in which two masters took writes.
func (fc *faultCheck) demoted(r *harness.Redis) error {
	from := time.Now()
	first, err := r.Role()
	for role := first; role != "slave"; role, err = r.Role() {
		if time.Since(from) > settleWithin {
			return fmt.Errorf("%s restarted still answers role %q (%v) after %v", r.Addr, role, err, settleWithin)
		}
		poll := time.NewTimer(5 * time.Millisecond)
		<-poll.C // polling back-off
	}
	if first != "slave" {
		fc.h.twoMasterSpan(from, time.Now())
		fc.note(fmt.Sprintf("%s came back a master, demoted after %v", r.Addr, time.Since(from).Round(time.Millisecond)))
	}
	return nil
}

// gatewayFaults are every mode's: a replica dies (kill -9) or stops (SIGTERM), and a new one starts.
var gatewayFaults = []fault{
	{kind: "gateway kill -9", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
		return fc.replace(fc.pickGateway(rng, "kill -9 gateway"), func(g *harness.Gateway) { _ = g.Kill() })
	}},
	{kind: "gateway SIGTERM", weight: 1, inject: func(fc *faultCheck, rng *rand.Rand) error {
		return fc.replace(fc.pickGateway(rng, "SIGTERM gateway"), fc.stop)
	}},
}

// stop stops g (SIGTERM) and records an exit other than a clean one (a panic while shutting
// down, a data race the race detector reported: exit status 66) as a crash.
func (fc *faultCheck) stop(g *harness.Gateway) {
	if err := g.Stop(); err != nil {
		fc.note("gateway " + g.URL + " exited uncleanly on SIGTERM")
		fc.h.crash(fmt.Sprintf("gateway %s exited on SIGTERM with %v; log tail:\n%s", g.URL, err, g.LogTail(40)))
	}
}

func (fc *faultCheck) pickGateway(rng *rand.Rand, what string) *harness.Gateway {
	fc.mu.Lock()
	g := fc.gateways[rng.IntN(len(fc.gateways))]
	fc.mu.Unlock()
	fc.note(what + " " + g.URL)
	return g
}

// check runs the history checks, then waits for the system to settle (every lock free, every
// queue empty), checks every replica ever started for a crash, and logs the run's figures.
func (fc *faultCheck) check(start time.Time) {
	t := fc.t
	fc.mu.Lock()
	t.Logf("faults injected:\n  %s", strings.Join(fc.notes, "\n  "))
	fc.mu.Unlock()
	var unsettled []string
	c := fc.client(rand.New(rand.NewPCG(1, 2)))
	for _, lock := range fc.locks {
		var last string
		deadline := time.Now().Add(15 * time.Second) // a watchdog lease's max hold (5 s) and TTL, and slack
		for {
			r, err := c.Send(context.Background(), http.MethodGet, path(lock), nil, "")
			settled := err == nil && r.Status == http.StatusOK && r.JSON()["held"] == false && r.Int("waiters") == 0
			if isElection(lock) {
				settled = err == nil && r.Status == http.StatusOK && r.JSON()["led"] == false && r.Int("candidates") == 0
			}
			if settled {
				break
			}
			if err == nil {
				last = string(r.Body)
			}
			if time.Now().After(deadline) {
				unsettled = append(unsettled, fmt.Sprintf("%s not free with nobody waiting 15 s after the workload stopped: %s", lock, last))
				break
			}
			poll := time.NewTimer(100 * time.Millisecond)
			<-poll.C // polling back-off
		}
	}
	var electionLog []observed
	if fc.obs != nil {
		var problems []string
		_, electionLog, problems = fc.finishObserving(fc.election(), fc.obs)
		unsettled = append(unsettled, problems...)
	}
	// The replicas still running stop as in a rolling restart; then every replica ever started
	// is looked at for a crash.
	fc.mu.Lock()
	live, all := slices.Clone(fc.gateways), slices.Clone(fc.all)
	fc.mu.Unlock()
	for _, g := range all {
		if crashed, _ := g.Crashed(); crashed {
			fc.crashed(g)
		}
	}
	var wg sync.WaitGroup
	for _, g := range live {
		if crashed, _ := g.Crashed(); !crashed {
			wg.Go(func() { fc.stop(g) })
		}
	}
	wg.Wait()
	rep := fc.h.check(fc.mode.promise, fc.d.quorum)
	rep.add("not settled", unsettled...)
	if fc.obs != nil {
		fc.checkElection(rep, fc.election(), fc.obs, electionLog)
	}
	rep.report(t)
	if len(rep.violations) > 0 { // the gateways' own account of what failed, by request ID
		for _, g := range all {
			var errs []string
			for _, line := range strings.Split(g.Logs(), "\n") {
				if strings.Contains(line, `"level":"ERROR"`) && len(errs) < 20 {
					errs = append(errs, line)
				}
			}
			if len(errs) > 0 {
				t.Logf("gateway %s logged errors:\n%s", g.URL, strings.Join(errs, "\n"))
			}
		}
	}
	t.Logf("summary %s (%s: %s): %v, %s", fc.mode.name, fc.mode.promise, fc.mode.why,
		time.Since(start).Round(time.Second), rep.figures(&fc.h))
}
