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
// and one heartbeat that keeps them all in line (heartbeat.go). A waiter registers here before it
// enqueues in Redis, so a grant published at any moment after the enqueue finds it.
type waiters struct {
	e         *engine
	replica   string        // this process's ID in queue entries
	max       int           // cap on byLease
	heartbeat time.Duration // Options.Heartbeat

	mu         sync.Mutex
	byLease    map[string]*waiter
	heartbeats map[string]*lockHeartbeat // by the lock's (or semaphore's) key
	beatBufs   []*callBuf                // buffers of keepalive calls that ended, for later ones (see kept)
	wake       chan struct{}             // tells tend that a check is due sooner than planned
	planned    time.Time                 // when tend looks next for a due check (zero: when poked)

	events eventSink // live event streams, which ride on the same subscription (event_hub.go)
	// heardRelease handles another client's release message on a layout's channel (set by
	// followReleases when some layout has them; see redisson_wakeups.go).
	heardRelease func(rueidis.PubSubMessage)
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
	fence int64 // > 0: the lock was handed to this waiter with this fence
	// since, when set, says the hold came with the waiter's TTL, from a release this process sent
	// at since (the TTL counts from no earlier): it needs no confirmation (see waiters.handOver).
	// Zero: the hold is a claim the waiter confirms.
	since   time.Time
	requeue bool // Redis lost this waiter's queue entry: queue again at the original arrival
	stop    bool // a nudge: see waiter.stop
	from    int  // which copy of the locks said so: 0 on one Redis, 1 + a RedLock master's index
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

// newWaiters returns the process's waiters; start them (listen, keepInLine) once events is set.
// Close stops every waiter (see waiter.stop).
func newWaiters(e *engine, replica string, opts Options) *waiters {
	ws := &waiters{e: e, replica: replica, max: opts.MaxWaiters, heartbeat: opts.Heartbeat,
		byLease: map[string]*waiter{}, heartbeats: map[string]*lockHeartbeat{}, wake: make(chan struct{}, 1)}
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

// handingOver is the replica a release names for its script to give the holds it hands to this
// process's waiters their TTLs at once (release.lua's here), rather than claims that their
// gateway, which may be frozen or gone, must confirm: this process runs the release, so it is
// there to hand them over (handOver). None ("") where the deployment does not let a release
// hand over (deployment.handsOver: RedLock, replica acks).
func (ws *waiters) handingOver() string {
	if !ws.e.dep.handsOver() {
		return ""
	}
	return ws.replica
}

// handOver hands the holds a release sent at since gave this process's waiters (see handingOver)
// to them. A hold whose waiter has left is not lost: a waiter leaves the queue in Redis
// (dequeue.lua) before it leaves here, and that passes on a hold handed to it. A hold whose
// release's reply was lost reaches its waiter through the heartbeat, which reports the waiting
// leases that hold, as a claim to confirm.
func (ws *waiters) handOver(handed []handedHold, since time.Time) {
	for _, h := range handed {
		ws.deliver(h.lease, waitEvent{fence: h.fence, since: since})
	}
}

// join registers a waiter and makes sure the heartbeat looks after its lock. It counts the wait in the
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
		hb = &lockHeartbeat{ref: ref, keys: e.keys(ref).all(), slot: e.dep.slot(key),
			leases: map[string]struct{}{}}
		ws.heartbeats[key] = hb
		if f, ok := e.dep.releaseFeed(e.space.layoutOf(ref).releaseChannel(ref.Name)); ok {
			hb.unfollow = ws.followReleaseFeed(f)
		}
	}
	hb.leases[lease] = struct{}{}
	return w, nil
}

// leave unregisters w; the heartbeat stops looking after its lock once it has no local waiters.
func (ws *waiters) leave(w *waiter) {
	ws.mu.Lock()
	delete(ws.byLease, w.lease)
	if hb := ws.heartbeats[w.key]; hb != nil {
		delete(hb.leases, w.lease)
		if len(hb.leases) == 0 {
			delete(ws.heartbeats, w.key)
			if hb.unfollow != nil {
				hb.unfollow()
			}
		}
	}
	ws.mu.Unlock()
	ws.e.wg.Done()
}

// lockHeartbeat is what the heartbeat (heartbeat.go) keeps of one lock with local waiters. Guarded by
// waiters.mu, but for args, which only the lock's check uses (one at a time: checking).
type lockHeartbeat struct {
	ref    Ref
	keys   []string            // its eight keys (keys.all), made once
	slot   int                 // its keys' slot (deployment.slot)
	leases map[string]struct{} // this process's waiting leases for it
	// unfollow ends the subscription to the sharded release channel of the lock's layout (a name
	// shared with Redisson, on Redis Cluster; nil elsewhere), once nobody here waits on it.
	unfollow func()

	due      time.Time // when tend runs heartbeat.lua on it next; zero: when something asks
	checking bool      // heartbeat.lua runs on it now
	keeping  bool      // a keepalive call on it is on its way

	// args is the last check's ARGV (the common ones, then the leases), kept for the next check
	// once every copy of the locks answered it: a check then makes no garbage of its own (with
	// 10,000 waiters on one lock an ARGV takes 160 KB).
	args []string
}

// callBuf holds a keepalive call's KEYS and ARGV, kept from one beat for the next (see kept).
type callBuf struct{ keys, args []string }

// parked returns how many waiting acquires this process holds now.
func (ws *waiters) parked() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.byLease)
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
