package lockcore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// heartbeat looks after one lock on behalf of this process's waiters for it: it keeps their queue
// entries alive, notices the holder's expiry (which publishes nothing), and recovers grants and
// queue entries lost to pub/sub gaps or a Redis restart. Its Redis cost is one heartbeat script
// per beat (or expiry), whatever the number of waiters.
type heartbeat struct {
	ref    Ref
	key    string              // ref's key, the heartbeat's key in waiters.heartbeats
	leases map[string]struct{} // guarded by waiters.mu

	mu   sync.Mutex
	due  time.Time // next beat
	wake chan struct{}
}

func newHeartbeat(ref Ref, key string) *heartbeat {
	return &heartbeat{ref: ref, key: key, leases: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// checkBy moves the next beat forward to at (never backward).
func (hb *heartbeat) checkBy(at time.Time) {
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

func (hb *heartbeat) next() time.Time {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.due
}

// beat runs hb until its lock has no local waiters or the Service closes.
func (ws *waiters) beat(hb *heartbeat) {
	defer ws.s.wg.Done()
	hb.checkBy(time.Now().Add(ws.s.heartbeat))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(time.Until(hb.next()))
		select {
		case <-ws.s.ctx.Done():
			return
		case <-hb.wake:
			if time.Now().Before(hb.next()) {
				continue
			}
		case <-timer.C:
		}
		leases, ok := ws.leasesOf(hb)
		if !ok {
			return
		}
		hb.mu.Lock()
		hb.due = time.Time{}
		hb.mu.Unlock()
		hb.checkBy(time.Now().Add(ws.runHeartbeat(hb.ref, leases)))
	}
}

// leasesOf returns the leases hb looks after, or false (and forgets hb) when there are none left.
func (ws *waiters) leasesOf(hb *heartbeat) ([]string, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(hb.leases) == 0 {
		delete(ws.heartbeats, hb.key)
		return nil, false
	}
	leases := make([]string, 0, len(hb.leases))
	for l := range hb.leases {
		leases = append(leases, l)
	}
	return leases, true
}

// runHeartbeat runs the heartbeat script for ref and acts on its reply; it returns when to beat
// again.
func (ws *waiters) runHeartbeat(ref Ref, leases []string) time.Duration {
	if ws.s.rl != nil {
		return ws.runHeartbeatRedLock(ref, leases)
	}
	reply, err := ws.s.runQueued(context.Background(), ws.s.heartbeatScript, ref, leases...)
	return ws.actOnHeartbeat(ref, reply, err, 0)
}

// runHeartbeatRedLock runs the heartbeat on every RedLock master and acts on each reply as it
// comes: a hold any master handed a waiter makes it confirm, which a majority must agree to (see
// redlock_quorum.go), and an entry any master lost makes it queue again there. It returns once a
// majority answered (at most a beat later): a stalled master must not hold up the beats that keep
// the waiters alive on the others; its reply is acted on when it comes.
func (ws *waiters) runHeartbeatRedLock(ref Ref, leases []string) time.Duration {
	k := ws.s.keys(ref)
	f := ws.s.rl.send(context.Background(), ws.s.heartbeatScript, k.all(), ws.s.scriptArgs(k.lock, ref.Kind, leases))
	var mu sync.Mutex
	next := ws.s.heartbeat
	act := func(r masterReply) {
		reply, err := r.res.ToArray()
		if err != nil {
			return // the masters that answer keep the waiters in line
		}
		d := ws.actOnHeartbeat(ref, reply, nil, r.m.i+1)
		mu.Lock()
		next = min(next, d)
		mu.Unlock()
	}
	got := f.collect(time.Now().Add(ws.s.heartbeat), func(got []masterReply, _ int) bool {
		return countCounted(got) >= ws.s.rl.quorum
	})
	for _, r := range got {
		if r.res.Error() == nil {
			act(r)
		}
	}
	f.rest(act)
	mu.Lock()
	defer mu.Unlock()
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
		ws.s.log.Warn("queue heartbeat failed; retrying", ref.Kind.String(), ref.Name, "err", err)
		return 100 * time.Millisecond
	}
	for i := int64(0); i < granted; i++ { // grants whose message may have been lost
		lease, _ := reply[2+2*i].ToString()
		fence, _ := reply[3+2*i].AsInt64()
		ws.deliver(lease, event{fence: fence, from: from})
	}
	for _, m := range reply[2+2*granted:] {
		lease, _ := m.ToString()
		ws.deliver(lease, event{requeue: true})
	}
	next := ws.s.heartbeat
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
