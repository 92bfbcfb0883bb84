package lockcore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Live events ride on the process's one pub/sub subscription (waiters.go): the scripts that change
// a lock's holders or queue publish an event to the grants channel of every replica watching the
// lock (notify in lib.lua), and onMessage hands it to the streams here. A lock is watched while
// some replica streams it: that replica keeps an entry in the hash <lock key>:watch (replica ->
// until when), which it renews every watchKeep and removes when its last stream on the lock ends.
// A lock nobody watches has no such hash, and its scripts publish nothing.

const (
	watchTTL  = 30 * time.Second // a replica's watch entry (and the hash) lasts this long unless kept
	watchKeep = 10 * time.Second // how often a replica keeps its entries
)

// eventHub is this process's streams, by lock. Safe for concurrent use.
type eventHub struct {
	e  *engine
	ws *waiters

	mu    sync.Mutex
	locks map[string]*watchedLock // by the lock's (or semaphore's) key
}

// watchedLock is one lock this process streams, and the keeper goroutine of its watch entry.
type watchedLock struct {
	ref     Ref
	key     string
	streams map[*Stream]struct{} // guarded by eventHub.mu
	closing bool                 // guarded by eventHub.mu: the keeper is removing the entry
	// snapshots counts the watch_snapshot calls under way (begun under eventHub.mu while not
	// closing): the keeper waits for them before it removes the entry, which they would add back.
	snapshots sync.WaitGroup
	idle      chan struct{} // cap 1: a stream left, maybe the last
	gone      chan struct{} // closed once the keeper has removed the entry and returned
}

func newEventHub(e *engine, ws *waiters) *eventHub {
	return &eventHub{e: e, ws: ws, locks: map[string]*watchedLock{}}
}

// join registers st with its lock, starting the lock's keeper if st is its first stream here, and
// returns once events for st can arrive (on Redis Cluster, once the subscription of the lock's
// slot is confirmed, or a second has passed: st is then marked early, and resyncs when the
// subscription is confirmed, see resyncEarly). A keeper still removing the lock's entry is waited
// for first, so that its removal cannot land after st's snapshot adds the entry back. It fails
// with ErrShuttingDown once the Service closes, or with ctx's error.
func (h *eventHub) join(ctx context.Context, st *Stream) error {
	for {
		h.mu.Lock()
		wl := h.locks[st.key]
		if wl != nil && wl.closing {
			h.mu.Unlock()
			select {
			case <-wl.gone:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var start func()
		if wl == nil {
			wl = &watchedLock{ref: st.ref, key: st.key, streams: map[*Stream]struct{}{},
				idle: make(chan struct{}, 1), gone: make(chan struct{})}
			start = func() { h.keep(wl) }
		}
		ready, err := h.ws.watchFrom(st.key, start)
		if err != nil {
			h.mu.Unlock()
			return err
		}
		h.locks[st.key] = wl
		wl.streams[st] = struct{}{}
		st.wl = wl
		h.mu.Unlock()
		awaitSubscription(ctx, ready)
		h.mu.Lock() // ordered with resyncEarly, which runs after ready is closed
		select {
		case <-ready:
		default:
			st.early = true
		}
		h.mu.Unlock()
		return ctx.Err()
	}
}

// leave unregisters st; the keeper removes the lock's entry once no stream is left.
func (h *eventHub) leave(st *Stream) {
	h.mu.Lock()
	delete(st.wl.streams, st)
	empty := len(st.wl.streams) == 0
	h.mu.Unlock()
	if empty {
		select {
		case st.wl.idle <- struct{}{}:
		default:
		}
	}
}

// keep renews this replica's watch entry of wl every watchKeep until wl has no stream left or the
// Service closes, then removes it, once the snapshots under way have ended (see
// Stream.snapshot: none starts after that). An entry found missing (it ran out during a Redis stall, or
// Redis lost it) makes wl's streams resync: events were not sent here meanwhile.
func (h *eventHub) keep(wl *watchedLock) {
	defer close(wl.gone)
	t := time.NewTicker(watchKeep)
	defer t.Stop()
	for {
		select {
		case <-h.e.ctx.Done():
			h.mu.Lock()
			wl.closing = true
			h.mu.Unlock()
			h.remove(wl)
			return
		case <-wl.idle:
			h.mu.Lock()
			closing := len(wl.streams) == 0
			wl.closing = closing
			h.mu.Unlock()
			if !closing {
				continue
			}
			h.remove(wl)
			return
		case <-t.C:
			missing, err := h.runWatch(context.Background(), wl, "keep")
			if err != nil {
				h.e.log.Warn("keeping a watch of live events failed; retrying", wl.ref.Kind.String(), wl.ref.Name, "err", err)
				continue
			}
			if missing == 1 {
				h.resync(func(k string) bool { return k == wl.key })
			}
		}
	}
}

// remove ends wl once its keeper has marked it closing: it waits for the snapshots under way,
// removes the entry from Redis and forgets wl (a join waiting for wl.gone then starts afresh).
func (h *eventHub) remove(wl *watchedLock) {
	wl.snapshots.Wait()
	h.drop(wl)
	h.mu.Lock()
	if h.locks[wl.key] == wl {
		delete(h.locks, wl.key)
	}
	h.mu.Unlock()
}

// drop removes this replica's watch entry of wl, on a context of its own (the Service may be
// closing). A failure costs little: the entry runs out within watchTTL.
func (h *eventHub) drop(wl *watchedLock) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := h.runWatch(ctx, wl, "drop"); err != nil {
		h.e.log.Warn("removing a watch of live events failed; it runs out by itself", wl.ref.Kind.String(), wl.ref.Name, "err", err)
	}
}

// beginSnapshot counts a watch_snapshot call of st, which must not run once st has left or the
// Service is closing (it would add back an entry that nobody keeps); call end when it is done.
func (h *eventHub) beginSnapshot(st *Stream) (end func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, in := st.wl.streams[st]
	switch {
	case h.e.ctx.Err() != nil || st.wl.closing:
		return nil, ErrShuttingDown
	case !in:
		return nil, ErrStreamEnded
	}
	st.wl.snapshots.Add(1)
	return st.wl.snapshots.Done, nil
}

// runWatch runs watch.lua's op ("keep" or "drop") for this replica's entry of wl.
func (h *eventHub) runWatch(ctx context.Context, wl *watchedLock, op string) (int64, error) {
	n, err := h.e.do(ctx, scripts.watch, []string{watchKey(wl.key)}, []string{op, h.ws.replica, ms(watchTTL)}).AsInt64()
	return n, classify(err)
}

// deliver hands an event message (see notify in lib.lua) to the streams of its lock. It runs on
// the subscription's reader goroutine and never blocks: a stream whose buffer is full is told to
// resync instead.
func (h *eventHub) deliver(raw string) {
	m, ok := parseEventMsg(raw)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	wl := h.locks[m.key]
	if wl == nil {
		return
	}
	for st := range wl.streams {
		select {
		case st.msgs <- m:
		default:
			st.markResync()
		}
	}
}

// resync tells every stream of the locks whose key matches that it may have missed events, e.g.
// after the subscription was made again (messages published during the gap are lost).
func (h *eventHub) resync(match func(key string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, wl := range h.locks {
		if match(key) {
			for st := range wl.streams {
				st.markResync()
			}
		}
	}
}

// resyncEarly makes the streams of the locks whose key matches that joined before their
// subscription was first confirmed (marked early by join) read their locks again: their state may
// be older than the subscription, and the messages in between were lost.
func (h *eventHub) resyncEarly(match func(key string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, wl := range h.locks {
		if !match(key) {
			continue
		}
		for st := range wl.streams {
			if st.early {
				st.early = false
				st.markResync()
			}
		}
	}
}

// eventMsg is one event message of a lock, as notify in lib.lua sends it:
// "v <lock key> <epoch> <seq> <type> <waiters> <now_ms>", then "<fence> <mode> <ttl_ms> <owner>"
// per hold, one a line.
type eventMsg struct {
	key     string
	epoch   string
	seq     int64
	typ     string // g, h, r, e, f, w, t
	waiters int64
	at      time.Time // Redis time
	holds   []msgHold
}

type msgHold struct {
	fence int64
	mode  Mode
	ttl   time.Duration
	owner string
}

func parseEventMsg(raw string) (*eventMsg, bool) {
	lines := strings.Split(raw, "\n")
	f := strings.Fields(lines[0])
	if len(f) != 7 || f[0] != "v" {
		return nil, false
	}
	seq, err1 := strconv.ParseInt(f[3], 10, 64)
	waiters, err2 := strconv.ParseInt(f[5], 10, 64)
	at, err3 := strconv.ParseInt(f[6], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || !strings.Contains("ghrefwt", f[4]) || len(f[4]) != 1 {
		return nil, false
	}
	m := &eventMsg{key: f[1], epoch: f[2], seq: seq, typ: f[4], waiters: waiters, at: time.UnixMilli(at)}
	for _, line := range lines[1:] {
		p := strings.SplitN(line, " ", 4)
		if len(p) != 4 {
			return nil, false
		}
		fence, err1 := strconv.ParseInt(p[0], 10, 64)
		ttl, err2 := strconv.ParseInt(p[2], 10, 64)
		if err1 != nil || err2 != nil || (p[1] != "x" && p[1] != "s") {
			return nil, false
		}
		h := msgHold{fence: fence, mode: Exclusive, ttl: time.Duration(ttl) * time.Millisecond, owner: p[3]}
		if p[1] == "s" {
			h.mode = Shared
		}
		m.holds = append(m.holds, h)
	}
	return m, true
}
