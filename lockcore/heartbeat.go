package lockcore

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The heartbeat: how this process keeps its waiters in line and finds what pub/sub lost, for
// every lock (or semaphore) it has waiters for, with two goroutines whatever their number:
//
//   - beat: every Heartbeat, keepalive.lua over all those locks, one call per batch of locks of
//     one slot (keepaliveLocks). It pushes the waiters' liveness deadlines forward at a few Redis
//     commands per lock, and names the locks that need a closer look: a waiter not queued any
//     more (handed a hold whose message may have been lost, or Redis lost its entry), or a lock
//     whose earliest hold ran out (an expiry publishes nothing).
//   - tend: heartbeat.lua on one lock when it is due: at its holder's expiry (as the enqueue, the
//     script's own reply or an expiry hint tells), when the beat names it, and on every
//     (re)subscription. It hands a free lock on, delivers grants whose message was lost, and has
//     waiters Redis forgot queue again at their arrival.
//
// Until #28 each lock had a heartbeat goroutine of its own running heartbeat.lua every Heartbeat:
// with waiters on 10,000 locks, 40,000 script calls a second (more than redis-server ran here) and
// a goroutine per lock (go run ./bench -only waitmem -waitmem-locks 10000; docs/performance.md).

// dueBy makes hb due by at (never later than it was), and pokes tend if that is sooner than it
// planned to look. Called with ws.mu held.
func (ws *waiters) dueBy(hb *lockHeartbeat, at time.Time) {
	if hb.due.IsZero() || at.Before(hb.due) {
		hb.due = at
	}
	if ws.planned.IsZero() || at.Before(ws.planned) {
		ws.poke()
	}
}

const (
	// keepaliveLocks and keepaliveLeases bound one keepalive call: at most this many locks, and
	// no more locks once it carries this many leases (a lock's leases all go in one call). Redis
	// runs one call at a time, so a call must stay short: each lock takes it a few commands.
	keepaliveLocks, keepaliveLeases = 100, 1000
	// heartbeatCalls bounds the goroutines that make one beat's calls.
	heartbeatCalls = 16
	// beatRetry is how soon a beat follows one that failed.
	beatRetry = 100 * time.Millisecond
	// keptBufs bounds the call buffers kept for the next beat.
	keptBufs = 1024
)

// checkBy makes the lock (or semaphore) with key due for a check by at, e.g. when its holder's
// lease runs out.
func (ws *waiters) checkBy(key string, at time.Time) {
	ws.mu.Lock()
	if hb := ws.heartbeats[key]; hb != nil {
		ws.dueBy(hb, at)
	}
	ws.mu.Unlock()
}

// checkAll makes every lock with local waiters due for a check now.
func (ws *waiters) checkAll() {
	ws.mu.Lock()
	now := time.Now()
	for _, hb := range ws.heartbeats {
		ws.dueBy(hb, now)
	}
	ws.mu.Unlock()
}

// poke tells tend that a check is due sooner than it planned.
func (ws *waiters) poke() {
	select {
	case ws.wake <- struct{}{}:
	default:
	}
}

// keepInLine starts the heartbeat's two goroutines, which run until the Service closes.
func (ws *waiters) keepInLine() {
	ws.e.wg.Go(ws.beat)
	ws.e.wg.Go(ws.tend)
}

// beat runs keepAlive every Heartbeat (sooner after one that failed) until the Service closes.
func (ws *waiters) beat() {
	t := time.NewTimer(ws.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ws.e.ctx.Done():
			return
		case <-t.C:
		}
		start, next := time.Now(), ws.heartbeat
		if !ws.keepAlive() {
			next = beatRetry
		}
		t.Reset(next - time.Since(start))
	}
}

// keepaliveCall is one keepalive.lua call of a beat: its locks, and its KEYS and ARGV.
type keepaliveCall struct {
	locks []*lockHeartbeat
	buf   *callBuf
}

// keepAlive runs one beat: keepalive.lua on every batch of locks with local waiters (see
// keepalives), each call on every copy of the locks, by up to heartbeatCalls goroutines; a lock
// that any copy names becomes due for a check now. It returns once every call answered (on
// RedLock, a majority of masters), reporting whether none failed, or after a Heartbeat: calls
// stalled on one Redis (a Cluster master failing over, a slot moving) must not hold up the beat of
// locks elsewhere, whose waiters would drop out of line. The calls nobody took by then are left
// to the next beat, which also leaves out the locks of calls still on their way.
func (ws *waiters) keepAlive() bool {
	calls := ws.keepalives()
	var next atomic.Int64 // the index of the next call to take
	take := func() (keepaliveCall, bool) {
		if i := next.Add(1) - 1; i < int64(len(calls)) {
			return calls[i], true
		}
		return keepaliveCall{}, false
	}
	var failed atomic.Bool
	workers := min(heartbeatCalls, len(calls))
	done := make(chan struct{}, workers)
	for range workers {
		ws.e.wg.Go(func() {
			for k, ok := take(); ok; k, ok = take() {
				all, fine := ws.runKeepalive(k)
				if !fine {
					failed.Store(true)
				}
				ws.kept(k, all)
			}
			done <- struct{}{}
		})
	}
	t := time.NewTimer(ws.heartbeat)
	defer t.Stop()
	for range workers {
		select {
		case <-done:
		case <-t.C:
			for k, ok := take(); ok; k, ok = take() {
				ws.kept(k, true)
			}
			return !failed.Load()
		}
	}
	return !failed.Load()
}

// keepalives returns a beat's calls: the locks with local waiters and no keepalive call on its
// way, by slot (the keys of one call share a slot on Redis Cluster), in batches of up to
// keepaliveLocks locks or keepaliveLeases leases, with their KEYS and ARGV made in buffers that
// earlier beats' calls left (see kept).
func (ws *waiters) keepalives() []keepaliveCall {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.heartbeats) == 0 {
		return nil
	}
	locks := make([]*lockHeartbeat, 0, len(ws.heartbeats))
	for _, hb := range ws.heartbeats {
		if !hb.keeping {
			hb.keeping = true
			locks = append(locks, hb)
		}
	}
	slices.SortFunc(locks, func(a, b *lockHeartbeat) int { return a.slot - b.slot })
	var calls []keepaliveCall
	for start := 0; start < len(locks); {
		end, leases := start, 0
		for end < len(locks) && end-start < keepaliveLocks && leases < keepaliveLeases &&
			locks[end].slot == locks[start].slot {
			leases += len(locks[end].leases)
			end++
		}
		calls = append(calls, ws.keepaliveOf(locks[start:end:end], leases))
		start = end
	}
	return calls
}

// keepaliveOf makes the call of keepalive.lua on locks (of one slot, with leases leases in all),
// in a buffer an earlier call left when there is one. Called with ws.mu held.
func (ws *waiters) keepaliveOf(locks []*lockHeartbeat, leases int) keepaliveCall {
	nKeys, nArgs := 7*len(locks), 6+2*len(locks)+leases
	buf := &callBuf{}
	if n := len(ws.beatBufs); n > 0 {
		buf, ws.beatBufs[n-1] = ws.beatBufs[n-1], nil
		ws.beatBufs = ws.beatBufs[:n-1]
	}
	buf.keys, buf.args = fit(buf.keys, nKeys), fit(buf.args, nArgs)
	buf.args = append(buf.args, ws.e.commonArgs(locks[0].keys[0], ws.e.space.kindArg(locks[0].ref))...)
	for _, hb := range locks {
		buf.keys = append(buf.keys, hb.keys...)
		buf.args = append(buf.args, ws.e.space.kindArg(hb.ref), strconv.Itoa(len(hb.leases)))
		for l := range hb.leases {
			buf.args = append(buf.args, l)
		}
	}
	return keepaliveCall{locks: locks, buf: buf}
}

// fit returns s emptied when it has room for n elements and not a crowd's worth more, else a new
// slice with room for n and some to grow.
func fit(s []string, n int) []string {
	if cap(s) < n || cap(s) > 2*n+64 {
		return make([]string, 0, n+n/4)
	}
	return s[:0]
}

// kept ends the keepalive call k, made or left out: its locks may go in the next beat's calls, and
// its buffer, unless a copy of the locks may not have read it yet (reusable false), serves a later
// call (the next beat's are about as many and as long).
func (ws *waiters) kept(k keepaliveCall, reusable bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, hb := range k.locks {
		hb.keeping = false
	}
	if reusable && len(ws.beatBufs) < keptBufs {
		clear(k.buf.keys)
		clear(k.buf.args) // holds no lease of a waiter that left
		ws.beatBufs = append(ws.beatBufs, k.buf)
	}
}

// runKeepalive runs the keepalive call k on every copy of the locks and makes the locks a copy
// names due for a check now. It reports whether every copy answered (all) and whether none failed
// (ok).
func (ws *waiters) runKeepalive(k keepaliveCall) (all, ok bool) {
	c := call{script: scripts.keepalive, keys: k.buf.keys, args: k.buf.args}
	var mu sync.Mutex
	answered, failed := 0, false
	ws.e.dep.each(context.Background(), c, ws.heartbeat, func(_ int, reply []rueidis.RedisMessage, err error) {
		var named []int64
		if err == nil {
			named, err = ints(reply)
		}
		mu.Lock()
		answered++
		failed = failed || err != nil
		mu.Unlock()
		if err != nil {
			ws.e.log.Warn("queue keepalive failed; retrying", "locks", len(k.locks), "err", err)
			return
		}
		if len(named) == 0 {
			return
		}
		now := time.Now()
		ws.mu.Lock()
		for _, i := range named {
			if i >= 1 && int(i) <= len(k.locks) {
				ws.dueBy(k.locks[i-1], now)
			}
		}
		ws.mu.Unlock()
	})
	mu.Lock()
	defer mu.Unlock()
	return answered == len(ws.e.dep.copies()), !failed
}

// tend runs heartbeat.lua on each lock when it is due (see the top of this file), each check on
// a goroutine of its own (a check stalled on one Redis must not hold up the others), until the
// Service closes.
func (ws *waiters) tend() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due, next := ws.takeDue(time.Now())
		for _, hb := range due {
			ws.e.wg.Go(func() { ws.check(hb) })
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t.Reset(wait)
		select {
		case <-ws.e.ctx.Done():
			return
		case <-ws.wake:
		case <-t.C:
		}
	}
}

// takeDue returns the locks due for a check at now, marked as being checked, and when the next
// of the others is due (zero: none is), which it keeps as planned: a lock due sooner pokes tend
// (see dueBy). It looks at every lock with local waiters, so tend runs it only when poked or at
// the planned time (a lock's enqueue and each expiry hint make it due, mostly later than planned).
func (ws *waiters) takeDue(now time.Time) (due []*lockHeartbeat, next time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, hb := range ws.heartbeats {
		switch {
		case hb.checking || hb.due.IsZero():
		case !hb.due.After(now):
			hb.checking, hb.due = true, time.Time{}
			due = append(due, hb)
		case next.IsZero() || hb.due.Before(next):
			next = hb.due
		}
	}
	ws.planned = next
	return due, next
}

// check runs heartbeat.lua on hb's lock for its local waiters, and makes it due again when the
// reply says (its earliest hold's expiry; soon after a failure).
func (ws *waiters) check(hb *lockHeartbeat) {
	c := ws.e.lockCall(hb.ref).call(scripts.heartbeat, nil)
	ws.mu.Lock()
	n := len(c.args) + len(hb.leases)
	hb.args = append(fit(hb.args, n), c.args...)
	for l := range hb.leases {
		hb.args = append(hb.args, l)
	}
	waiting := len(hb.leases) > 0
	ws.mu.Unlock()
	next := time.Duration(-1)
	if waiting {
		c.args = hb.args
		next = ws.runHeartbeat(hb, c)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	hb.checking = false
	at := hb.due // it was made due while being checked, which takeDue passed over
	if again := time.Now().Add(next); next >= 0 && (at.IsZero() || again.Before(at)) {
		at = again
	}
	if !at.IsZero() {
		ws.dueBy(hb, at)
	}
}

// runHeartbeat runs the heartbeat call c for hb's lock on every copy of the locks and acts on each
// reply as it comes: a hold any copy handed a waiter makes it confirm (on RedLock a majority must
// agree to it, see redlock_quorum.go), and an entry any copy lost makes it queue again there. It
// returns when to check again (-1: when something asks), once enough copies answered (at most a
// Heartbeat later): a stalled RedLock master must not hold up the others; its reply is acted on
// when it comes. hb.args (c's ARGV) is kept for the next check only if every copy answered: a
// call still on its way may not have read it yet.
func (ws *waiters) runHeartbeat(hb *lockHeartbeat, c call) time.Duration {
	var mu sync.Mutex
	next, answered := time.Duration(-1), 0
	ws.e.dep.each(context.Background(), c, ws.heartbeat,
		func(from int, reply []rueidis.RedisMessage, err error) {
			d := ws.actOnHeartbeat(hb.ref, reply, err, from)
			mu.Lock()
			if d >= 0 && (next < 0 || d < next) {
				next = d
			}
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

// actOnHeartbeat acts on a heartbeat's reply (from: see event); it returns when to check the lock
// again: at its earliest hold's expiry, soon after a failure, or -1 (nothing holds it: the beat
// notices what changes that without a message).
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
		return beatRetry
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
	if wait < 0 {
		return -1
	}
	return time.Duration(wait)*time.Millisecond + time.Millisecond
}

func heartbeatInt(reply []rueidis.RedisMessage, i int) (int64, error) {
	if len(reply) <= i {
		return 0, unexpectedReply("heartbeat", "", len(reply), nil)
	}
	return reply[i].AsInt64()
}
