package lockcore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// waiters are this process's waiting acquires. They share one pub/sub subscription to the
// process's own channel, on which the scripts that hand a lock on address the waiter they picked,
// and one heartbeat per lock that has local waiters (heartbeat.go). A waiter registers here before
// it enqueues in Redis, so a grant published at any moment after the enqueue finds it.
type waiters struct {
	e         *engine
	replica   string        // this process's ID in queue entries
	max       int           // cap on byLease
	heartbeat time.Duration // Options.Heartbeat

	mu         sync.Mutex
	byLease    map[string]*waiter
	heartbeats map[string]*lockHeartbeat // by the lock's (or semaphore's) key

	events eventSink // live event streams, which ride on the same subscription (event_hub.go)
}

// eventSink hears what the subscriptions carry for live event streams (the event hub): their
// messages, and when messages may have been lost, which locks to read again.
type eventSink interface {
	deliver(msg string)
	resync(match func(key string) bool)
	resyncEarly(match func(key string) bool)
}

// waiter is one waiting Acquire. Its events channel receives grants addressed to it, requests
// to queue again and nudges after a stop; sends never block (a full channel already holds
// something to act on, and stopped stays set).
type waiter struct {
	key     string // its lock's (or semaphore's) key
	lease   string
	events  chan waitEvent
	ready   <-chan struct{} // closed once a grant for it can arrive (see deployment.ready)
	stopped atomic.Bool     // its wait ran out or the Service is closing (see stop)
}

// waitEvent is what a waiter is told: the lock is handed to it, or it must queue again, or stop.
type waitEvent struct {
	fence   int64 // > 0: the lock was handed to this waiter with this fence
	requeue bool  // Redis lost this waiter's queue entry: queue again at the original arrival
	stop    bool  // a nudge: see waiter.stop
	from    int   // which copy of the locks said so: 0 on one Redis, 1 + a RedLock master's index
}

// stop ends w's wait: its deadline passed or the Service is closing. The waiting goroutine checks
// stopped before it blocks, and the nudge wakes it if it already did. There is at most one nudge,
// and the channel has room for it beside the events (see join).
func (w *waiter) stop() {
	if w.stopped.Swap(true) {
		return
	}
	select {
	case w.events <- waitEvent{stop: true}:
	default:
	}
}

// pending returns an event in w's channel other than a nudge, if there is one.
func (w *waiter) pending() (waitEvent, bool) {
	for {
		select {
		case ev := <-w.events:
			if !ev.stop {
				return ev, true
			}
		default:
			return waitEvent{}, false
		}
	}
}

// newWaiters returns the process's waiters; start them (listen) once events is set. Close stops
// every waiter (see waiter.stop).
func newWaiters(e *engine, replica string, opts Options) *waiters {
	ws := &waiters{e: e, replica: replica, max: opts.MaxWaiters, heartbeat: opts.Heartbeat,
		byLease: map[string]*waiter{}, heartbeats: map[string]*lockHeartbeat{}}
	e.wg.Go(func() {
		<-e.ctx.Done()
		ws.stopAll()
	})
	return ws
}

// stopAll stops every waiter; join refuses new ones once the Service's context ended.
func (ws *waiters) stopAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byLease {
		w.stop()
	}
}

// deliver hands ev to the waiter of lease, if it is still here. It never blocks.
func (ws *waiters) deliver(lease string, ev waitEvent) {
	ws.mu.Lock()
	w := ws.byLease[lease]
	ws.mu.Unlock()
	if w != nil {
		select {
		case w.events <- ev:
		default:
		}
	}
}

// join registers a waiter and makes sure its lock has a heartbeat. It counts the wait in the
// Service's WaitGroup (leave calls Done), so Close waits for every wait. It fails with
// ErrTooManyWaiters at the cap and with ErrUnavailable once the Service is closing.
func (ws *waiters) join(ref Ref, lease string) (*waiter, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	e := ws.e
	if e.ctx.Err() != nil {
		return nil, errShuttingDown
	}
	if len(ws.byLease) >= ws.max {
		return nil, ErrTooManyWaiters
	}
	key := e.keys(ref).lock
	// Room for one event per copy of the locks (on RedLock a waiter gathers a majority's
	// hand-offs), and for the nudge of a stop.
	w := &waiter{key: key, lease: lease, events: make(chan waitEvent, len(e.dep.copies())+1), ready: e.dep.ready(ws, key)}
	e.wg.Add(1)
	ws.byLease[lease] = w
	hb := ws.heartbeats[key]
	if hb == nil {
		hb = newHeartbeat(ref, key)
		ws.heartbeats[key] = hb
		e.wg.Go(func() { ws.beat(hb) })
	}
	hb.leases[lease] = struct{}{}
	return w, nil
}

// leave unregisters w; its lock's heartbeat ends by itself once it has no waiters.
func (ws *waiters) leave(w *waiter) {
	ws.mu.Lock()
	delete(ws.byLease, w.lease)
	if hb := ws.heartbeats[w.key]; hb != nil {
		delete(hb.leases, w.lease)
	}
	ws.mu.Unlock()
	ws.e.wg.Done()
}

// checkBy makes the heartbeat of the lock (or semaphore) with key check it by at, e.g. when a
// holder's lease runs out.
func (ws *waiters) checkBy(key string, at time.Time) {
	ws.mu.Lock()
	hb := ws.heartbeats[key]
	ws.mu.Unlock()
	if hb != nil {
		hb.checkBy(at)
	}
}

func (ws *waiters) checkAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	now := time.Now()
	for _, hb := range ws.heartbeats {
		hb.checkBy(now)
	}
}

// parked returns how many waiting acquires this process holds now.
func (ws *waiters) parked() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.byLease)
}

// lockHeartbeat looks after one lock on behalf of this process's waiters for it: it keeps their queue
// entries alive, notices the holder's expiry (which publishes nothing), and recovers grants and
// queue entries lost to pub/sub gaps or a Redis restart. Its Redis cost is one heartbeat script
// per beat (or expiry), whatever the number of waiters.
type lockHeartbeat struct {
	ref    Ref
	key    string              // ref's key, the heartbeat's key in waiters.heartbeats
	leases map[string]struct{} // guarded by waiters.mu

	mu   sync.Mutex
	due  time.Time // next beat
	wake chan struct{}

	// args is the last beat's ARGV (the common ones, then the leases), kept for the next beat once
	// every copy of the locks answered it: a beat then makes no garbage of its own. With 10,000
	// waiters on one lock a beat's ARGV takes 160 KB; remade four times a second, that garbage
	// kept ~20 MB more RSS between collections (go run ./bench -only waitmem). Only beat uses it.
	args []string
}

func newHeartbeat(ref Ref, key string) *lockHeartbeat {
	return &lockHeartbeat{ref: ref, key: key, leases: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// checkBy moves the next beat forward to at (never backward).
func (hb *lockHeartbeat) checkBy(at time.Time) {
	hb.mu.Lock()
	if hb.due.IsZero() || at.Before(hb.due) {
		hb.due = at
	}
	hb.mu.Unlock()
	select {
	case hb.wake <- struct{}{}:
	default:
	}
}

func (hb *lockHeartbeat) next() time.Time {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.due
}

// beat runs hb until its lock has no local waiters or the Service closes.
func (ws *waiters) beat(hb *lockHeartbeat) {
	hb.checkBy(time.Now().Add(ws.heartbeat))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(time.Until(hb.next()))
		select {
		case <-ws.e.ctx.Done():
			return
		case <-hb.wake:
			if time.Now().Before(hb.next()) {
				continue
			}
		case <-timer.C:
		}
		c := ws.e.lockCall(hb.ref).call(scripts.heartbeat, nil)
		if !ws.argsOf(hb, c.args) {
			return
		}
		c.args = hb.args
		hb.mu.Lock()
		hb.due = time.Time{}
		hb.mu.Unlock()
		hb.checkBy(time.Now().Add(ws.runHeartbeat(hb, c)))
	}
}

// argsOf sets hb.args to the heartbeat's ARGV: common, then the leases hb looks after. It reports
// false (and forgets hb) when there are none left.
func (ws *waiters) argsOf(hb *lockHeartbeat, common []string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(hb.leases) == 0 {
		delete(ws.heartbeats, hb.key)
		return false
	}
	n := len(common) + len(hb.leases)
	if cap(hb.args) < n || cap(hb.args) > 2*n+64 { // room to grow, but not a crowd's worth for a few
		hb.args = make([]string, 0, n+n/4)
	}
	hb.args = append(hb.args[:0], common...)
	for l := range hb.leases {
		hb.args = append(hb.args, l)
	}
	return true
}

// runHeartbeat runs the heartbeat call c for hb's lock on every copy of the locks and acts on each
// reply as it comes: a hold any copy handed a waiter makes it confirm (on RedLock a majority must
// agree to it, see redlock_quorum.go), and an entry any copy lost makes it queue again there. It
// returns when to beat again, once enough copies answered (at most a beat later): a stalled RedLock
// master must not hold up the beats that keep the waiters alive on the others; its reply is acted
// on when it comes. hb.args (c's ARGV) is kept for the next beat only if every copy answered:
// a call still on its way may not have read it yet.
func (ws *waiters) runHeartbeat(hb *lockHeartbeat, c call) time.Duration {
	var mu sync.Mutex
	next, answered := ws.heartbeat, 0
	ws.e.dep.each(context.Background(), c, ws.heartbeat,
		func(from int, reply []rueidis.RedisMessage, err error) {
			d := ws.actOnHeartbeat(hb.ref, reply, err, from)
			mu.Lock()
			next = min(next, d)
			answered++
			mu.Unlock()
		})
	mu.Lock()
	defer mu.Unlock()
	if answered == len(ws.e.dep.copies()) {
		clear(hb.args) // holds no lease of a waiter that left
	} else {
		hb.args = nil
	}
	return next
}

// actOnHeartbeat acts on a heartbeat's reply (from: see event); it returns when to beat again.
func (ws *waiters) actOnHeartbeat(ref Ref, reply []rueidis.RedisMessage, err error, from int) time.Duration {
	var wait, granted int64
	if err == nil {
		wait, err = heartbeatInt(reply, 0)
	}
	if err == nil {
		granted, err = heartbeatInt(reply, 1)
	}
	if err == nil && (granted < 0 || int64(len(reply)) < 2+2*granted) {
		err = unexpectedReply("heartbeat", ref.Name, len(reply), nil)
	}
	if err != nil {
		ws.e.log.Warn("queue heartbeat failed; retrying", ref.Kind.String(), ref.Name, "err", err)
		return 100 * time.Millisecond
	}
	for i := int64(0); i < granted; i++ { // grants whose message may have been lost
		lease, _ := reply[2+2*i].ToString()
		fence, _ := reply[3+2*i].AsInt64()
		ws.deliver(lease, waitEvent{fence: fence, from: from})
	}
	for _, m := range reply[2+2*granted:] {
		lease, _ := m.ToString()
		ws.deliver(lease, waitEvent{requeue: true})
	}
	next := ws.heartbeat
	if expiry := time.Duration(wait)*time.Millisecond + time.Millisecond; wait >= 0 && expiry < next {
		next = expiry
	}
	return next
}

func heartbeatInt(reply []rueidis.RedisMessage, i int) (int64, error) {
	if len(reply) <= i {
		return 0, unexpectedReply("heartbeat", "", len(reply), nil)
	}
	return reply[i].AsInt64()
}

// subscriptionWait bounds how long a waiter waits for its slot's new subscription (Redis Cluster)
// before it queues anyway: a grant that finds no subscriber is recovered by the heartbeat.
const subscriptionWait = time.Second

// awaitSubscription waits until ready is closed, subscriptionWait passes or ctx ends.
func awaitSubscription(ctx context.Context, ready <-chan struct{}) {
	select {
	case <-ready:
		return
	default:
	}
	t := time.NewTimer(subscriptionWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
	}
}
