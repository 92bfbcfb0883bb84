// Package metrics is leasegate's Prometheus instrumentation: the collectors behind GET /metrics,
// fed by lockcore (as its lockcore.Observer), by the HTTP layer (ObserveRequest) and by the
// long-hold sweep (SetHolds). No metric has a per-lock-name label: names are unbounded. docs/operations.md
// ("Metrics") lists them; deploy/prometheus has alerting rules on them.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasegate/leasegate/lockcore"
)

// Metrics holds the gateway's collectors in a registry of its own.
type Metrics struct {
	reg *prometheus.Registry

	grants, releases                  *prometheus.CounterVec
	conflicts, lost, expiries, forced *prometheus.CounterVec
	waitsStarted, waitsEnded          *prometheus.CounterVec
	waitSeconds, holdSeconds          *prometheus.HistogramVec
	watchdogSwept                     prometheus.Counter
	watchdogRenewals                  *prometheus.CounterVec
	watchdogFailing                   prometheus.Gauge
	failingInARow                     atomic.Int64
	scriptCalls                       *prometheus.CounterVec
	scriptSeconds                     *prometheus.HistogramVec
	redisErrors, reconnects           prometheus.Counter
	redisUp                           prometheus.Gauge
	httpRequests                      *prometheus.CounterVec
	httpSeconds                       *prometheus.HistogramVec
	longHolds, oldestHold             prometheus.Gauge
	leaderChanges                     *prometheus.CounterVec
	proclaims                         prometheus.Counter
	authForgotten                     prometheus.Counter

	// The series every request and script call records, looked up once (see series).
	requestSeries series[requestLabels, counterAndTimer]
	scriptSeries  series[scriptLabels, counterAndTimer]
	grantSeries   series[grantLabels, counterAndTimer]
	releaseSeries series[releaseLabels, counterAndTimer]
}

// latencyBuckets suit calls that take well under a millisecond on loopback and up to seconds
// under trouble.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// durationBuckets suit waits and holds: from a millisecond to an hour.
var durationBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 600, 1800, 3600}

// New returns the gateway's metrics, with Go runtime and process collectors; longHold is the
// configured LEASEGATE_LONG_HOLD, exported as leasegate_long_hold_threshold_seconds.
func New(longHold time.Duration) *Metrics {
	reg := prometheus.NewRegistry()
	f := factory{reg}
	m := &Metrics{
		reg:          reg,
		grants:       f.counters("grants_total", "Holds granted, by how: new (at once), reentry, handoff (after waiting).", "kind", "mode", "how"),
		releases:     f.counters("releases_total", "Holds given back by their lease's release.", "kind", "mode"),
		conflicts:    f.counters("conflicts_total", "Acquires answered 409: held (try-once, or a wait that ran out).", "kind"),
		lost:         f.counters("lost_total", "Calls answered 410: the lease no longer holds.", "kind"),
		expiries:     f.counters("expiries_total", "Leases this replica found gone before their release: 410 answers and watchdog duties that found their lease lost.", "kind"),
		forced:       f.counters("forced_releases_total", "Force-releases (DELETE ?force=true).", "kind"),
		waitsStarted: f.counters("waits_started_total", "Acquires that joined a wait queue.", "kind"),
		waitsEnded:   f.counters("waits_ended_total", "Waits that ended, by outcome: granted, timeout, abandoned (the client left), error.", "kind", "outcome"),
		waitSeconds:  f.histograms("wait_seconds", "Time from joining the queue to the grant, for granted waits.", durationBuckets, "kind"),
		holdSeconds: f.histograms("hold_seconds", "Time from a hold's grant to its release (locks and semaphores; a multi-lock's members count as locks).",
			durationBuckets, "kind", "mode"),
		watchdogSwept:    f.counter("watchdog_swept_total", "Watchdog duties this replica claimed and ran."),
		watchdogRenewals: f.counters("watchdog_renewals_total", "Watchdog renewals by outcome: renewed, ended (released, past max hold, or gone), lost (a multi-lock's member gone), error.", "outcome"),
		watchdogFailing:  f.gauge("watchdog_consecutive_failures", "Watchdog renewals on this replica that failed in a row (reset by a success)."),
		scriptCalls:      f.counters("redis_script_calls_total", "Redis script calls by script and outcome (ok, error).", "script", "outcome"),
		scriptSeconds:    f.histograms("redis_script_duration_seconds", "Redis script call latency, round trip included.", latencyBuckets, "script"),
		redisErrors:      f.counter("redis_errors_total", "Redis calls that failed (transport or Redis errors)."),
		reconnects:       f.counter("redis_reconnects_total", "Pub/sub (re)subscriptions after the first: each follows a lost connection."),
		redisUp:          f.gauge("redis_up", "1 when the last Redis check (every long-hold sweep) succeeded, else 0."),
		httpRequests:     f.counters("http_requests_total", "HTTP requests by route pattern, method and status.", "route", "method", "status"),
		httpSeconds:      f.histograms("http_request_duration_seconds", "HTTP request latency by route pattern and method (long-polls included).", latencyBuckets, "route", "method"),
		longHolds:        f.gauge("long_holds", "Holds (locks, semaphore permits) older than LEASEGATE_LONG_HOLD, all replicas, as of the last sweep."),
		oldestHold:       f.gauge("oldest_hold_seconds", "Age of the oldest hold older than LEASEGATE_LONG_HOLD (0: none), as of the last sweep."),
		leaderChanges: f.counters("leader_changes_total", "Leader changes this replica announced in elections' logs: elected, resigned, "+
			"vacant (a leader's lease found gone).", "event"),
		proclaims: f.counter("leader_proclaims_total", "New values election leaders proclaimed through this replica."),
		authForgotten: f.counter("auth_failures_forgotten_total", "Client addresses the failed-authentication throttle forgot to make room "+
			"(its table keeps the 10,000 seen last): many addresses failing at once."),
	}
	f.gauge("long_hold_threshold_seconds", "LEASEGATE_LONG_HOLD: holds older than this count as long.").Set(longHold.Seconds())
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Parked exports n() as leasegate_parked_requests, read at each scrape.
func (m *Metrics) Parked(n func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasegate_parked_requests",
		Help: "Waiting requests parked on this replica."}, func() float64 { return float64(n()) }))
}

// AuthFailureForgotten counts one client address the failed-authentication throttle forgot to make
// room (handlers.AuthFailures.Evicted).
func (m *Metrics) AuthFailureForgotten() { m.authForgotten.Inc() }

// ObserveRequest counts one HTTP request; route is its chi pattern ("" for no route). Every label
// has a bounded set of values, whatever clients send: the routes' patterns or "unmatched", the
// routes' methods or "other", and the status.
func (m *Metrics) ObserveRequest(route, method string, status int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.requestSeries.get(requestLabels{route, methodLabel(method), status}, func(l requestLabels) counterAndTimer {
		return counterAndTimer{m.httpRequests.WithLabelValues(l.route, l.method, strconv.Itoa(l.status)),
			m.httpSeconds.WithLabelValues(l.route, l.method)}
	}).observe(took)
}

type requestLabels struct {
	route, method string
	status        int
}

// methodLabel is method when a route of the API takes it, else "other": methods are the client's
// to choose, and each distinct label value would be a series kept until restart.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete:
		return method
	}
	return "other"
}

// SetRedisUp records the outcome of a Redis check.
func (m *Metrics) SetRedisUp(up bool) {
	if up {
		m.redisUp.Set(1)
	} else {
		m.redisUp.Set(0)
	}
}

// SetLongHolds records a long-hold sweep: n holds older than the threshold, the oldest that old.
func (m *Metrics) SetLongHolds(n int, oldest time.Duration) {
	m.longHolds.Set(float64(n))
	m.oldestHold.Set(oldest.Seconds())
}

// The lockcore.Observer methods.

func (m *Metrics) Granted(kind string, mode lockcore.Mode, how lockcore.GrantHow, waited time.Duration) {
	g := m.grantSeries.get(grantLabels{kind, mode, how}, func(l grantLabels) counterAndTimer {
		c := counterAndTimer{count: m.grants.WithLabelValues(l.kind, string(l.mode), string(l.how))}
		if l.how == lockcore.GrantHandOff {
			c.seconds = m.waitSeconds.WithLabelValues(l.kind)
		}
		return c
	})
	g.count.Inc()
	if g.seconds != nil {
		g.seconds.Observe(waited.Seconds())
	}
}

type grantLabels struct {
	kind string
	mode lockcore.Mode
	how  lockcore.GrantHow
}

func (m *Metrics) HoldReleased(kind string, mode lockcore.Mode, held time.Duration) {
	r := m.releaseSeries.get(releaseLabels{kind, mode}, func(l releaseLabels) counterAndTimer {
		return counterAndTimer{m.releases.WithLabelValues(l.kind, string(l.mode)), m.holdSeconds.WithLabelValues(l.kind, string(l.mode))}
	})
	r.count.Inc()
	if held >= 0 {
		r.seconds.Observe(held.Seconds())
	}
}

type releaseLabels struct {
	kind string
	mode lockcore.Mode
}

func (m *Metrics) Refused(kind string) { m.conflicts.WithLabelValues(kind).Inc() }

func (m *Metrics) ForceReleased(kind string) { m.forced.WithLabelValues(kind).Inc() }

func (m *Metrics) Lost(kind string) {
	m.lost.WithLabelValues(kind).Inc()
	m.expiries.WithLabelValues(kind).Inc()
}

func (m *Metrics) WaitStarted(kind string) { m.waitsStarted.WithLabelValues(kind).Inc() }

func (m *Metrics) WaitEnded(kind string, outcome lockcore.WaitOutcome) {
	m.waitsEnded.WithLabelValues(kind, string(outcome)).Inc()
}

func (m *Metrics) WatchdogSwept(duties int) { m.watchdogSwept.Add(float64(duties)) }

func (m *Metrics) WatchdogRenewal(outcome string) {
	m.watchdogRenewals.WithLabelValues(outcome).Inc()
	switch outcome {
	case "error":
		m.watchdogFailing.Set(float64(m.failingInARow.Add(1)))
	case "lost":
		m.expiries.WithLabelValues("multilock").Inc()
		fallthrough
	default:
		m.failingInARow.Store(0)
		m.watchdogFailing.Set(0)
	}
}

func (m *Metrics) ScriptCall(name string, failed bool, took time.Duration) {
	m.scriptSeries.get(scriptLabels{name, failed}, func(l scriptLabels) counterAndTimer {
		outcome := "ok"
		if l.failed {
			outcome = "error"
		}
		return counterAndTimer{m.scriptCalls.WithLabelValues(l.name, outcome), m.scriptSeconds.WithLabelValues(l.name)}
	}).observe(took)
}

type scriptLabels struct {
	name   string
	failed bool
}

func (m *Metrics) RedisError()   { m.redisErrors.Inc() }
func (m *Metrics) Resubscribed() { m.reconnects.Inc() }

func (m *Metrics) ElectionLogged(event string) {
	switch event {
	case "proclaimed":
		m.proclaims.Inc()
	case "elected", "resigned", "vacant":
		m.leaderChanges.WithLabelValues(event).Inc()
	}
}

// series caches the children of metric vectors by their labels (K), for the metrics recorded on
// every request: a vector's own lookup (WithLabelValues) hashes the label values and takes a read
// lock that every request shares, whose cache line the cores then pass back and forth (go test
// ./metrics -bench CycleParallel). The vectors never delete a child, so a cached one stays theirs.
type series[K comparable, V any] struct {
	m sync.Map // K -> V
}

// get returns the children of labels l, made by create the first time.
func (s *series[K, V]) get(l K, create func(K) V) V {
	if v, ok := s.m.Load(l); ok {
		return v.(V)
	}
	v, _ := s.m.LoadOrStore(l, create(l))
	return v.(V)
}

// counterAndTimer are the children of a counter vector and of a histogram vector (nil: none) that
// one event records.
type counterAndTimer struct {
	count   prometheus.Counter
	seconds prometheus.Observer
}

// observe counts one event that took took.
func (c counterAndTimer) observe(took time.Duration) {
	c.count.Inc()
	c.seconds.Observe(took.Seconds())
}

// factory registers leasegate_ collectors.
type factory struct{ reg *prometheus.Registry }

func (f factory) counters(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "leasegate", Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "leasegate", Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "leasegate", Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) histograms(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "leasegate", Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

var _ lockcore.Observer = (*Metrics)(nil)

// RedLockMasters exports, read at each scrape, each RedLock master's state:
// leasegate_redlock_master_counted{master} (1 while its votes count: up, checked and past its
// restart guard) and leasegate_redlock_master_guard_seconds{master} (what its restart guard has
// left).
func (m *Metrics) RedLockMasters(masters func() []lockcore.MasterState) {
	m.reg.MustRegister(mastersCollector{
		masters: masters,
		counted: prometheus.NewDesc("leasegate_redlock_master_counted",
			"1 while the RedLock master's votes count toward quorums (it answers, was checked, and is past its restart guard), else 0.", []string{"master"}, nil),
		guard: prometheus.NewDesc("leasegate_redlock_master_guard_seconds",
			"What the RedLock master's restart guard has left (0: none).", []string{"master"}, nil),
	})
}

type mastersCollector struct {
	masters        func() []lockcore.MasterState
	counted, guard *prometheus.Desc
}

func (c mastersCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.counted
	ch <- c.guard
}

func (c mastersCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.masters() {
		counted := 0.0
		if st.Counts {
			counted = 1
		}
		ch <- prometheus.MustNewConstMetric(c.counted, prometheus.GaugeValue, counted, st.Addr)
		ch <- prometheus.MustNewConstMetric(c.guard, prometheus.GaugeValue, st.GuardLeft.Seconds(), st.Addr)
	}
}
