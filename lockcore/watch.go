package lockcore

import (
	"context"
	"sync"
	"time"
)

// watch looks after one lock on behalf of this process's waiters for it: it keeps their queue
// entries alive, notices the holder's expiry (which publishes nothing), and recovers grants and
// queue entries lost to pub/sub gaps or a Redis restart. Its Redis cost is one tend script per
// heartbeat (or expiry), whatever the number of waiters.
type watch struct {
	lock   string
	leases map[string]struct{} // guarded by room.mu

	mu   sync.Mutex
	due  time.Time // next tend
	wake chan struct{}
}

func newWatch(lock string) *watch {
	return &watch{lock: lock, leases: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// poke moves the next check forward to at (never backward).
func (w *watch) poke(at time.Time) {
	w.mu.Lock()
	if w.due.IsZero() || at.Before(w.due) {
		w.due = at
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watch) next() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.due
}

func (r *room) runWatch(w *watch) {
	defer r.s.wg.Done()
	w.poke(time.Now().Add(r.s.heartbeat))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(time.Until(w.next()))
		select {
		case <-r.s.ctx.Done():
			return
		case <-w.wake:
			if time.Now().Before(w.next()) {
				continue
			}
		case <-timer.C:
		}
		leases, ok := r.watched(w)
		if !ok {
			return
		}
		w.mu.Lock()
		w.due = time.Time{}
		w.mu.Unlock()
		w.poke(time.Now().Add(r.tend(w.lock, leases)))
	}
}

// watched returns the leases w looks after, or false (and forgets w) when there are none left.
func (r *room) watched(w *watch) ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(w.leases) == 0 {
		delete(r.watches, w.lock)
		return nil, false
	}
	leases := make([]string, 0, len(w.leases))
	for l := range w.leases {
		leases = append(leases, l)
	}
	return leases, true
}

// tend runs the tend script for lock and acts on its reply; it returns when to tend again.
func (r *room) tend(lock string, leases []string) time.Duration {
	k := r.s.keys(lock)
	args := append([]string{r.s.livenessMs, r.s.claimMs, r.s.chanPrefix}, leases...)
	reply, err := r.s.exec(context.Background(), r.s.tendScript, k.all(), args)
	if err != nil || len(reply) < 3 {
		r.s.log.Warn("tend failed; retrying", "lock", lock, "err", err)
		return 100 * time.Millisecond
	}
	holder, _ := reply[0].ToString()
	fence, _ := reply[1].AsInt64()
	pttl, _ := reply[2].AsInt64()
	if holder != "" {
		r.deliver(holder, event{fence: fence}) // a grant whose message was lost
	}
	for _, m := range reply[3:] {
		lease, _ := m.ToString()
		r.deliver(lease, event{requeue: true})
	}
	next := r.s.heartbeat
	if expiry := time.Duration(pttl)*time.Millisecond + time.Millisecond; pttl >= 0 && expiry < next {
		next = expiry
	}
	return next
}
