package lockcore

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// waiters are this process's waiting acquires. They share one pub/sub subscription to the
// process's own channel, on which the scripts that hand a lock on address the waiter they picked,
// and one heartbeat per lock that has local waiters (heartbeat.go). A waiter registers here before
// it enqueues in Redis, so a grant published at any moment after the enqueue finds it.
type waiters struct {
	s       *Service
	replica string // this process's ID in queue entries
	channel string // chanPrefix + replica
	max     int    // cap on byLease

	mu         sync.Mutex
	byLease    map[string]*waiter
	heartbeats map[string]*heartbeat // by the lock's (or semaphore's) key
	slots      map[int]*slotSub      // Redis Cluster: this process's subscription per slot

	events *eventHub // live event streams, which ride on the same subscription (event_hub.go)
}

// slotSub is, on Redis Cluster, this process's sharded subscription to its grants channel of one
// slot (see Service.chanPrefixFor): made when a waiter first waits on a lock of that slot, kept
// until the Service closes (at most one per slot).
type slotSub struct {
	ready chan struct{} // closed once the subscription is first confirmed
	once  sync.Once
}

// waiter is one waiting Acquire. Its events channel receives grants addressed to it and requests
// to queue again; sends never block (a full channel already holds something to act on).
type waiter struct {
	key    string // its lock's (or semaphore's) key
	lease  string
	events chan event
	ready  <-chan struct{} // closed once a grant for it can arrive (its slot's subscription, on Cluster)
}

// closedChan is ready for a waiter whose grants arrive on the process-wide subscription.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

type event struct {
	fence   int64 // > 0: the lock was handed to this waiter with this fence
	requeue bool  // Redis lost this waiter's queue entry: queue again at the original arrival
	from    int   // RedLock: 1 + the index of the master that said so (0: one Redis)
}

// newWaiters starts the process's subscriber; it and the heartbeats stop when s.ctx ends.
func newWaiters(s *Service, replica string, max int) *waiters {
	ws := &waiters{
		s: s, replica: replica, channel: s.chanPrefix + replica, max: max,
		byLease: map[string]*waiter{}, heartbeats: map[string]*heartbeat{}, slots: map[int]*slotSub{},
	}
	ws.events = newEventHub(s, ws)
	if !s.cluster {
		for i, c := range s.clients() { // RedLock: every master hands on locks
			s.wg.Add(1)
			go ws.subscribe(c, masterTag(s, i))
		}
	}
	return ws
}

// subscribeSlot keeps this process's sharded subscription to its grants channel of slot alive
// until the Service closes (Redis Cluster). Each (re)subscription, e.g. after the slot moved to
// another node or a failover, makes every heartbeat check its lock at once, and the slot's event
// streams read their locks again: messages published during the gap are lost.
func (ws *waiters) subscribeSlot(slot int, sub *slotSub) {
	defer ws.s.wg.Done()
	channel := ws.s.slotChanPrefix(slot) + ws.replica
	for ws.s.ctx.Err() == nil {
		ctx := rueidis.WithOnSubscriptionHook(ws.s.ctx, func(s rueidis.PubSubSubscription) {
			if s.Kind == "ssubscribe" {
				ws.slotSubscribed(slot, sub)
			}
		})
		_ = ws.s.client.Receive(ctx, ws.s.client.B().Ssubscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) { ws.onMessage(m, 0) })
		select { // Receive returned: the slot moved (sunsubscribe), or Redis unreachable; again shortly
		case <-ws.s.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// slotSubscribed runs on each confirmation of the subscription of slot: every heartbeat checks
// its lock at once, and the slot's event streams read their locks again, since messages published
// before it were lost. On the first confirmation that concerns only the streams that took their
// state before it (their join stopped waiting for it, see eventHub.join): the others read their
// state after it.
func (ws *waiters) slotSubscribed(slot int, sub *slotSub) {
	first := false
	sub.once.Do(func() { close(sub.ready); first = true })
	ws.checkAll()
	if first {
		ws.events.resyncEarly(slot)
	} else {
		ws.events.resyncSlot(slot)
	}
}

// subscribe keeps the process's subscription alive until the Service closes. rueidis re-subscribes
// by itself after a lost connection; messages published during the gap are lost, so every
// (re)subscription makes each heartbeat check its lock at once, and every event stream read its
// lock again.
func (ws *waiters) subscribe(c rueidis.Client, from int) {
	defer ws.s.wg.Done()
	first := true
	for ws.s.ctx.Err() == nil {
		ctx := rueidis.WithOnSubscriptionHook(ws.s.ctx, func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" {
				if !first {
					ws.s.obs.Resubscribed()
				}
				first = false
				ws.checkAll()
				ws.events.resyncAll()
			}
		})
		_ = c.Receive(ctx, c.B().Subscribe().Channel(ws.channel).Build(), func(m rueidis.PubSubMessage) { ws.onMessage(m, from) })
		select { // Receive returned: Redis unreachable, or unsubscribed; try again shortly
		case <-ws.s.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// onMessage runs on the connection's reader goroutine: it must never block. Messages are
// "g <lease> <fence>" (a hold was handed to that waiter), "e <lock key> <ms>" (the lock's, or
// semaphore's, earliest hold runs out in ms; this process has its first waiter) and "v <lock
// key> ..." (a live event of a lock this process streams, see event_hub.go).
func (ws *waiters) onMessage(m rueidis.PubSubMessage, from int) {
	if strings.HasPrefix(m.Message, "v ") {
		ws.events.deliver(m.Message)
		return
	}
	f := strings.Fields(m.Message)
	if len(f) != 3 {
		return
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return
	}
	switch f[0] {
	case "g":
		ws.deliver(f[1], event{fence: n, from: from})
	case "e":
		if n >= 0 {
			ws.checkBy(f[1], time.Now().Add(time.Duration(n)*time.Millisecond+time.Millisecond))
		}
	}
}

// deliver hands ev to the waiter of lease, if it is still here. It never blocks.
func (ws *waiters) deliver(lease string, ev event) {
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
	if ws.s.ctx.Err() != nil {
		return nil, errShuttingDown
	}
	if len(ws.byLease) >= ws.max {
		return nil, ErrTooManyWaiters
	}
	key := ws.s.keys(ref).lock
	// Room for one event per master: on RedLock a waiter gathers a majority's hand-offs.
	w := &waiter{key: key, lease: lease, events: make(chan event, ws.s.masterCount()), ready: ws.subscription(key)}
	ws.s.wg.Add(1)
	ws.byLease[lease] = w
	hb := ws.heartbeats[key]
	if hb == nil {
		hb = newHeartbeat(ref, key)
		ws.heartbeats[key] = hb
		ws.s.wg.Add(1)
		go ws.beat(hb)
	}
	hb.leases[lease] = struct{}{}
	return w, nil
}

// subscription returns a channel closed once messages about the lock (or semaphore) with key can
// reach this process: at once, or on Redis Cluster once this process's subscription of the lock's
// slot is confirmed (made now if it is the slot's first). Call with ws.mu held, before Close.
func (ws *waiters) subscription(key string) <-chan struct{} {
	if !ws.s.cluster {
		return closedChan
	}
	slot := keySlot(key)
	sub := ws.slots[slot]
	if sub == nil {
		sub = &slotSub{ready: make(chan struct{})}
		ws.slots[slot] = sub
		ws.s.wg.Add(1)
		go ws.subscribeSlot(slot, sub)
	}
	return sub.ready
}

// leave unregisters w; its lock's heartbeat ends by itself once it has no waiters.
func (ws *waiters) leave(w *waiter) {
	ws.mu.Lock()
	delete(ws.byLease, w.lease)
	if hb := ws.heartbeats[w.key]; hb != nil {
		delete(hb.leases, w.lease)
	}
	ws.mu.Unlock()
	ws.s.wg.Done()
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

// masterTag is what events from master i say they come from: 1 + i on RedLock, 0 on one Redis.
func masterTag(s *Service, i int) int {
	if s.rl == nil {
		return 0
	}
	return i + 1
}

// Parked returns how many waiting acquires this Service holds now.
func (s *Service) Parked() int {
	s.waiters.mu.Lock()
	defer s.waiters.mu.Unlock()
	return len(s.waiters.byLease)
}
