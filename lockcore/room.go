package lockcore

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// room holds this process's waiters. It owns one pub/sub subscription to the process's own
// channel, on which release scripts address grants to the waiter they picked, and one watch per
// lock that has local waiters (watch.go). A waiter joins the room before it enqueues in Redis, so a
// grant published at any moment after the enqueue finds it.
type room struct {
	s       *Service
	replica string // this process's ID in queue entries
	channel string // chanPrefix + replica

	mu      sync.Mutex
	waiters map[string]*waiter // by lease ID
	watches map[string]*watch  // by lock name
}

// waiter is one waiting Acquire. Its events channel receives grants addressed to it and requests
// to queue again; sends never block (a full channel already holds something to act on).
type waiter struct {
	lock   string
	lease  string
	events chan event
	kick   func() // called after each delivery
}

type event struct {
	fence   int64 // > 0: the lock was handed to this waiter with this fence
	requeue bool  // Redis lost this waiter's queue entry: queue again at the original arrival
}

// newRoom starts the room's subscriber; it and the room's watches stop when s.ctx ends.
func newRoom(s *Service, replica string) *room {
	r := &room{
		s: s, replica: replica, channel: s.chanPrefix + replica,
		waiters: map[string]*waiter{}, watches: map[string]*watch{},
	}
	s.wg.Add(1)
	go r.subscribe()
	return r
}

// subscribe keeps the process's subscription alive until the room closes. rueidis re-subscribes by
// itself after a lost connection; messages published during the gap are lost, so every
// (re)subscription makes each watch re-check its lock at once.
func (r *room) subscribe() {
	defer r.s.wg.Done()
	for r.s.ctx.Err() == nil {
		ctx := rueidis.WithOnSubscriptionHook(r.s.ctx, func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" {
				r.pokeAll()
			}
		})
		_ = r.s.client.Receive(ctx, r.s.client.B().Subscribe().Channel(r.channel).Build(), r.onMessage)
		select { // Receive returned: Redis unreachable, or unsubscribed; try again shortly
		case <-r.s.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// onMessage runs on the connection's reader goroutine: it must never block. Messages are
// "g <lease> <fence>" (the lock was handed to that waiter) and "e <lock key> <pttl>" (the lock's
// lease runs out in pttl ms; this process has its first waiter).
func (r *room) onMessage(m rueidis.PubSubMessage) {
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
		r.deliver(f[1], event{fence: n})
	case "e":
		_, name, _ := strings.Cut(f[1], "{")
		name, _, _ = strings.Cut(name, "}")
		if n >= 0 {
			r.expect(name, time.Now().Add(time.Duration(n)*time.Millisecond+time.Millisecond))
		}
	}
}

func (r *room) deliver(lease string, ev event) {
	r.mu.Lock()
	w := r.waiters[lease]
	r.mu.Unlock()
	if w != nil {
		select {
		case w.events <- ev:
		default:
		}
		w.kick()
	}
}

// join registers a waiter and makes sure its lock is watched. It counts the wait in the Service's
// WaitGroup (the wait calls Done when it finishes), so Close waits for every wait. It fails once
// the Service is closing.
func (r *room) join(lock, lease string, kick func()) (*waiter, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s.ctx.Err() != nil {
		return nil, errShuttingDown
	}
	w := &waiter{lock: lock, lease: lease, events: make(chan event, 1), kick: kick}
	r.s.wg.Add(1) // the wait's; done when it finishes
	r.waiters[lease] = w
	wa := r.watches[lock]
	if wa == nil {
		wa = newWatch(lock)
		r.watches[lock] = wa
		r.s.wg.Add(1)
		go r.runWatch(wa)
	}
	wa.leases[lease] = struct{}{}
	return w, nil
}

// leave unregisters w; its lock's watch ends by itself once it has no waiters.
func (r *room) leave(w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiters, w.lease)
	if wa := r.watches[w.lock]; wa != nil {
		delete(wa.leases, w.lease)
	}
}

// expect tells lock's watch to check the lock again by at, e.g. when its holder's lease runs out.
func (r *room) expect(lock string, at time.Time) {
	r.mu.Lock()
	wa := r.watches[lock]
	r.mu.Unlock()
	if wa != nil {
		wa.poke(at)
	}
}

func (r *room) pokeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, wa := range r.watches {
		wa.poke(now)
	}
}
