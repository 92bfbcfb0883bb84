package lockcore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// EventType names what a Stream reports.
type EventType string

const (
	EventState     EventType = "state"      // the lock as it is: first, and after a resync
	EventGranted   EventType = "granted"    // a new hold (also after a hand-off)
	EventHandedOff EventType = "handed-off" // the hold of the next granted event went to a waiter
	EventReleased  EventType = "released"   // a hold was given back (its last reentry)
	EventExpired   EventType = "expired"    // a hold ran out without a release
	EventForced    EventType = "forced"     // a force release removed every hold
	EventWaiters   EventType = "waiters"    // someone joined or left the line
	EventLost      EventType = "lost"       // the stream's own lease ended by expiry or force; last event
)

// Why a stream's lease was lost (Event.Reason).
const (
	LostExpired = "expired"
	LostForced  = "forced"
	// LostGone: the stream missed events (a pub/sub gap) and then found the lease gone; it may
	// have run out, been forced, or been released through another stream of its owner.
	LostGone = "gone"
)

// EventHold is the hold an event is about.
type EventHold struct {
	Owner string
	Fence int64
	Mode  Mode // a semaphore's permits are Shared
}

// Event is one event of a Stream.
type Event struct {
	Type EventType
	At   time.Time // Redis time of the script that caused it; the gateway's clock for state, expired, lost
	// State is EventState's: the lock as Inspect reads it.
	State State
	// Hold is the hold granted, handed off, released or expired.
	Hold EventHold
	// Waiters is how many live waiters are in line after the event (EventGranted, EventWaiters).
	Waiters int64
	// Holds are the holds a force release removed (EventForced).
	Holds []EventHold
	// Fence and Reason tell which lease was lost and why (EventLost).
	Fence  int64
	Reason string
}

// ErrStreamEnded: Next was called after a stream's last event (EventLost), or after Close.
var ErrStreamEnded = errors.New("event stream ended")

const (
	streamBuffer = 256                    // messages a stream holds before it must resync
	catchUpWait  = time.Second            // how long a check waits for the events its snapshot counted
	retryCheck   = 250 * time.Millisecond // a check or resync that failed on Redis is retried after this
	expiryMargin = 2 * time.Millisecond   // a hold is checked this long after it should have run out
	minCheck     = 10 * time.Millisecond  // checks of one stream are at least this far apart
)

// Stream is one client's stream of the live events of a lock (or semaphore), opened by Watch.
//
// What it guarantees: its first event is EventState (the lock as it was when the stream started
// watching, with the watch taken in the same Redis script), and the events after it are exactly
// the changes Redis made after that state, in the order Redis ran the scripts that made them.
// Expiry publishes nothing in Redis: the stream inspects the lock when its earliest hold should
// run out, and reports a hold gone without a release as EventExpired; it does so as well, just
// before the event that proves it, when a newer grant shows the hold gone first. Delivery is
// at-most-once with resync: every message carries the lock's event number, so a stream that
// missed some (its buffer full because its client reads slowly, a pub/sub reconnection, Redis
// losing the watch) notices, reads the lock again and reports a fresh EventState instead of
// guessing what happened in between. Nothing is kept in Redis for replay.
//
// Next must not be called by more than one goroutine at a time; Close may be called from any.
type Stream struct {
	s     *Service
	hub   *eventHub
	ref   Ref
	key   string
	wl    *watchedLock // set by eventHub.join
	early bool         // guarded by eventHub.mu: joined before its slot's subscription was confirmed
	fence int64        // the Lease-Token's fence (see lease)

	msgs      chan *eventMsg
	flag      atomic.Bool   // set by the hub: messages were dropped, or may have been missed
	wake      chan struct{} // cap 1: flag was set
	closeOnce sync.Once
	closed    atomic.Bool // Close was called

	// What follows belongs to the goroutine calling Next.
	lease    string          // the Lease-Token's lease; "" without one, or after its own last release
	epoch    string          // the watch hash's epoch the events count in (see notify in lib.lua)
	oldEpoch map[string]bool // epochs of watch hashes gone since
	seq      int64           // the lock's last event applied
	holds    map[holdKey]*knownHold
	partial  bool // the last state listed only the first 100 shared holds
	waiters  int64
	held     []*eventMsg // messages taken from msgs, to apply after a resync or check
	out      []Event
	ended    bool
	stale    bool // a resync is due
	retrying bool // a resync failed on Redis; the timer retries it
	expired  map[holdKey]bool
	timer    *time.Timer
	due      time.Time // when timer fires; zero: not armed
}

type holdKey struct {
	fence int64
	mode  Mode
}

type knownHold struct {
	owner   string
	expires time.Time // the gateway's estimate
}

// Watch opens a stream of ref's live events (see Stream); its first event is EventState. With a
// token, the stream also reports that lease's loss (EventLost, the last event) when it ends by
// anything but its own release: the lease must hold ref now. Close the stream when done.
//
// It returns ErrInvalidToken for a bad token or a token of another lock (before touching Redis),
// ErrLeaseLost when the token's lease no longer holds ref, ErrShuttingDown once the Service closes
// and ErrUnavailable when Redis does not answer.
func (s *Service) Watch(ctx context.Context, ref Ref, token string) (*Stream, error) {
	st := &Stream{s: s, hub: s.waiters.events, ref: ref, key: s.keys(ref).lock, msgs: make(chan *eventMsg, streamBuffer),
		wake: make(chan struct{}, 1), oldEpoch: map[string]bool{}, expired: map[holdKey]bool{}}
	if token != "" {
		l, err := s.tokens.Parse(token, ref)
		if err != nil {
			return nil, err
		}
		st.lease, st.fence = l.ID, l.Fence
	}
	err := st.hub.join(ctx, st)
	var snap snapshot
	if err == nil {
		snap, err = st.snapshot(ctx)
	}
	if err == nil && st.lease != "" && !snap.yours {
		err = fmt.Errorf("%w: %s %q, lease %s", ErrLeaseLost, ref.Kind, ref.Name, st.lease)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	st.adopt(snap)
	return st, nil
}

// Close ends the stream; the replica stops watching the lock once its last stream has closed.
// Next returns ErrStreamEnded after it.
func (st *Stream) Close() {
	st.closeOnce.Do(func() {
		st.closed.Store(true)
		if st.wl != nil {
			st.hub.leave(st)
		}
	})
}

// Done returns a channel closed once the Service closes: from then on Next returns
// ErrShuttingDown, and whoever writes the stream's events out should stop waiting on its client.
func (st *Stream) Done() <-chan struct{} { return st.s.ctx.Done() }

// markResync asks the stream to read the lock again. It never blocks.
func (st *Stream) markResync() {
	st.flag.Store(true)
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// Next returns the stream's next event, waiting for one until ctx ends (ctx's error; the stream
// stays usable). It returns ErrShuttingDown once the Service closes and ErrStreamEnded after
// EventLost or Close.
func (st *Stream) Next(ctx context.Context) (Event, error) {
	for {
		if st.closed.Load() {
			return Event{}, ErrStreamEnded
		}
		if len(st.out) > 0 {
			ev := st.out[0]
			st.out = st.out[1:]
			return ev, nil
		}
		if st.ended {
			return Event{}, ErrStreamEnded
		}
		if st.flag.Swap(false) {
			st.stale = true
		}
		if st.stale && !st.retrying {
			st.resync()
			continue
		}
		if !st.stale && len(st.held) > 0 {
			m := st.held[0]
			st.held = st.held[1:]
			st.apply(m)
			continue
		}
		msgs := st.msgs
		if st.stale {
			msgs = nil // keep them for after the resync
		}
		select {
		case m := <-msgs:
			st.apply(m)
		case <-st.wake:
		case <-st.timerC():
			st.due = time.Time{}
			if st.stale {
				st.retrying = false
			} else {
				st.check()
			}
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-st.s.ctx.Done():
			return Event{}, ErrShuttingDown
		}
	}
}

// snapshot is the lock as watch_snapshot.lua read it, with the watch hash's epoch and the number
// of the lock's last event at that moment.
type snapshot struct {
	epoch string
	seq   int64
	state State
	yours bool
	mine  *knownHold // the token's lease's shared hold, listed or not; nil when it has none
	taken time.Time  // when the script was sent: remaining TTLs count from then
}

// snapshot (re)takes this replica's watch of the lock and reads the lock, in one script. It fails
// with ErrShuttingDown once the Service closes and ErrStreamEnded once st is closed, before
// touching Redis.
func (st *Stream) snapshot(ctx context.Context) (snapshot, error) {
	end, err := st.hub.beginSnapshot(st)
	if err != nil {
		return snapshot{}, err
	}
	defer end()
	k := st.s.keys(st.ref)
	taken := time.Now()
	reply, err := st.s.exec(ctx, watchSnapshotScript, []string{k.lock, k.q, k.qd, k.sh, k.shm, watchKey(k.lock)},
		[]string{st.lease, st.s.waiters.replica, ms(watchTTL)})
	if err != nil {
		return snapshot{}, err
	}
	r := replyValues(reply)
	if len(r) < 7 {
		return snapshot{}, unexpectedReply("watch_snapshot", st.ref.Name, r, nil)
	}
	epoch, ok1 := r[0].(string)
	seq, ok2 := r[1].(int64)
	mine, ok3 := r[2].(int64)
	mineOwner, ok4 := r[3].(string)
	state, ok5 := readState(st.ref, r[4:])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return snapshot{}, unexpectedReply("watch_snapshot", st.ref.Name, r, nil)
	}
	yours := r[6] == int64(1)
	if st.lease != "" {
		state.Yours = &yours
	}
	snap := snapshot{epoch: epoch, seq: seq, state: state, yours: yours, taken: taken}
	if mine >= 0 {
		snap.mine = &knownHold{owner: mineOwner, expires: taken.Add(time.Duration(mine) * time.Millisecond)}
	}
	return snap, nil
}

// holdsOf returns the holds a snapshot lists (with the shared hold of the lease with fence, which
// it always has), and whether it lists only some of the shared holds.
func holdsOf(snap snapshot, fence int64) (map[holdKey]*knownHold, bool) {
	holds := map[holdKey]*knownHold{}
	if x := snap.state.Exclusive; x != nil {
		holds[holdKey{x.Fence, Exclusive}] = &knownHold{owner: x.Owner, expires: snap.taken.Add(x.TTL)}
	}
	for _, h := range snap.state.Shared {
		holds[holdKey{h.Fence, Shared}] = &knownHold{owner: h.Owner, expires: snap.taken.Add(h.TTL)}
	}
	if snap.mine != nil && fence != 0 {
		holds[holdKey{fence, Shared}] = snap.mine
	}
	return holds, snap.state.SharedCount > int64(len(snap.state.Shared))
}

// adopt makes snap the stream's state and reports it (EventState): at the start, and after a
// resync, when a lease the stream reports on may have ended unseen.
func (st *Stream) adopt(snap snapshot) {
	now := time.Now()
	reason := LostGone
	if h := st.holdOf(st.fence); h != nil && !now.Before(h.expires) {
		reason = LostExpired
	}
	if st.epoch != "" && st.epoch != snap.epoch {
		st.oldEpoch[st.epoch] = true
	}
	st.epoch, st.seq, st.waiters = snap.epoch, snap.seq, snap.state.Waiters
	st.holds, st.partial = holdsOf(snap, st.fence)
	st.stale, st.retrying = false, false
	held := st.held[:0]
	for _, m := range st.held {
		if m.epoch == st.epoch && m.seq > st.seq {
			held = append(held, m)
		}
	}
	st.held = held
	st.emit(Event{Type: EventState, At: now, State: snap.state})
	if st.lease != "" && !snap.yours {
		st.lose(reason, now)
	}
	st.arm(time.Time{})
}

// resync reads the lock again after the stream may have missed events.
func (st *Stream) resync() {
	snap, err := st.snapshot(context.Background())
	if err != nil {
		st.retrying = true
		st.armAt(time.Now().Add(retryCheck))
		return
	}
	st.adopt(snap)
}

// apply applies one message of the lock's events.
func (st *Stream) apply(m *eventMsg) {
	switch {
	case st.oldEpoch[m.epoch] || (m.epoch == st.epoch && m.seq <= st.seq):
		return // part of the state the stream already has
	case m.epoch != st.epoch || m.seq != st.seq+1:
		st.stale = true // a new watch hash, or messages lost on the way
		st.held = append(st.held, m)
		return
	}
	st.seq = m.seq
	switch m.typ {
	case "g", "h":
		for _, h := range m.holds {
			st.supersede(h, m.at)
			st.holds[holdKey{h.fence, h.mode}] = &knownHold{owner: h.owner, expires: time.Now().Add(h.ttl)}
			hold := EventHold{Owner: h.owner, Fence: h.fence, Mode: h.mode}
			if m.typ == "h" {
				st.emit(Event{Type: EventHandedOff, At: m.at, Hold: hold})
			}
			st.emit(Event{Type: EventGranted, At: m.at, Hold: hold, Waiters: m.waiters})
		}
	case "r":
		for _, h := range m.holds {
			delete(st.holds, holdKey{h.fence, h.mode})
			st.emit(Event{Type: EventReleased, At: m.at, Hold: EventHold{Owner: h.owner, Fence: h.fence, Mode: h.mode}})
			if st.lease != "" && h.fence == st.fence && st.holdOf(st.fence) == nil {
				st.lease = "" // released by itself: there is nothing left for it to lose
			}
		}
	case "e":
		for _, h := range m.holds {
			k := holdKey{h.fence, h.mode}
			if _, known := st.holds[k]; known || (st.partial && !st.expired[k]) {
				st.expire(k, h.owner, m.at)
			}
		}
	case "f":
		ev := Event{Type: EventForced, At: m.at}
		lost := false
		for _, h := range m.holds {
			delete(st.holds, holdKey{h.fence, h.mode})
			ev.Holds = append(ev.Holds, EventHold{Owner: h.owner, Fence: h.fence, Mode: h.mode})
			lost = lost || (st.lease != "" && h.fence == st.fence)
		}
		st.emit(ev)
		if lost {
			st.lose(LostForced, time.Now())
		}
	case "t":
		// A renewal, re-entry or confirmed hand-off set these holds' TTLs (maybe shorter than
		// before): only the expiry estimates move; nothing is reported.
		for _, h := range m.holds {
			if kh := st.holds[holdKey{h.fence, h.mode}]; kh != nil {
				kh.expires = time.Now().Add(h.ttl)
			}
		}
	case "w":
		if m.waiters != st.waiters {
			st.emit(Event{Type: EventWaiters, At: m.at, Waiters: m.waiters})
		}
	}
	st.waiters = m.waiters
	st.arm(time.Time{})
}

// supersede reports as expired the holds of a lock that a new grant h shows gone: an exclusive
// grant means no other hold is left, a shared one that no exclusive hold is (of another lease:
// a downgrade keeps the fence). A release or force would have come first, so they ran out.
// Semaphore permits coexist: their expiry is reported when Redis reclaims them, or by check.
func (st *Stream) supersede(h msgHold, at time.Time) {
	if st.ref.Kind != KindLock {
		return
	}
	for k, kh := range st.holds {
		if k.fence != h.fence && (h.mode == Exclusive || k.mode == Exclusive) {
			st.expire(k, kh.owner, at)
		}
	}
}

// expire reports hold k gone without a release, and the loss of the stream's lease if it was its
// last hold.
func (st *Stream) expire(k holdKey, owner string, at time.Time) {
	delete(st.holds, k)
	if len(st.expired) > 4096 {
		clear(st.expired)
	}
	st.expired[k] = true
	st.emit(Event{Type: EventExpired, At: at, Hold: EventHold{Owner: owner, Fence: k.fence, Mode: k.mode}})
	if st.lease != "" && k.fence == st.fence && st.holdOf(st.fence) == nil {
		st.lose(LostExpired, time.Now())
	}
}

// lose reports the loss of the stream's lease and ends the stream.
func (st *Stream) lose(reason string, at time.Time) {
	st.emit(Event{Type: EventLost, At: at, Fence: st.fence, Reason: reason})
	st.ended = true
}

func (st *Stream) emit(ev Event) {
	if !st.ended {
		st.out = append(st.out, ev)
	}
}

// holdOf returns a hold of the lease with fence f (a lease's holds share its fence), or nil.
func (st *Stream) holdOf(f int64) *knownHold {
	if f == 0 {
		return nil
	}
	for _, mode := range []Mode{Exclusive, Shared} {
		if h := st.holds[holdKey{f, mode}]; h != nil {
			return h
		}
	}
	return nil
}

// check runs when the earliest known hold should have run out: it reads the lock again, applies
// the events that came before that reading, and reports the holds gone without an event as
// expired (renewals publish nothing: a hold still there just has a later expiry now).
func (st *Stream) check() {
	snap, err := st.snapshot(context.Background())
	if err != nil {
		st.armAt(time.Now().Add(retryCheck))
		return
	}
	if snap.epoch != st.epoch {
		st.adopt(snap)
		return
	}
	wait := time.NewTimer(catchUpWait)
	defer wait.Stop()
	for st.seq < snap.seq && !st.stale && !st.ended {
		var m *eventMsg
		if len(st.held) > 0 {
			m, st.held = st.held[0], st.held[1:]
		} else {
			select {
			case m = <-st.msgs:
			case <-wait.C:
				st.stale = true // counted events that never came: lost on the way
				continue
			case <-st.s.ctx.Done():
				return
			}
		}
		if m.epoch == st.epoch && m.seq > snap.seq {
			st.held = append([]*eventMsg{m}, st.held...)
			st.stale = true // the events up to the snapshot's were lost on the way
			continue
		}
		st.apply(m)
	}
	if st.ended {
		return
	}
	if st.stale || st.flag.Swap(false) {
		st.adopt(snap)
		return
	}
	now := time.Now()
	present, partial := holdsOf(snap, st.fence)
	for k, kh := range st.holds {
		switch {
		case present[k] != nil:
		case partial && k.mode == Shared && (st.lease == "" || k.fence != st.fence):
			// Not among the shared holds the snapshot lists: it may have been renewed past them.
			// Once its expiry has passed the stream forgets it; if it did run out, reclaim's
			// message reports it (see apply).
			if !now.Before(kh.expires) {
				delete(st.holds, k)
			}
		default: // the snapshot shows every hold of this kind (and always the lease's own)
			st.expire(k, kh.owner, now)
		}
	}
	for k, h := range present {
		st.holds[k] = h // a renewal shows here only
	}
	st.partial = partial
	if snap.state.Waiters != st.waiters {
		st.waiters = snap.state.Waiters
		st.emit(Event{Type: EventWaiters, At: now, Waiters: st.waiters})
	}
	if st.lease != "" && !snap.yours {
		st.lose(LostExpired, now)
	}
	st.arm(now.Add(minCheck))
}

// arm sets the timer to check the lock just after its earliest known hold should run out, not
// before floor; with no hold known, it stops.
func (st *Stream) arm(floor time.Time) {
	var at time.Time
	for _, h := range st.holds {
		if at.IsZero() || h.expires.Before(at) {
			at = h.expires
		}
	}
	if at.IsZero() || st.ended {
		st.due = time.Time{}
		if st.timer != nil {
			st.timer.Stop()
		}
		return
	}
	at = at.Add(expiryMargin)
	if at.Before(floor) {
		at = floor
	}
	if at.Equal(st.due) {
		return
	}
	st.armAt(at)
}

func (st *Stream) armAt(at time.Time) {
	if st.timer == nil {
		st.timer = time.NewTimer(time.Until(at))
	} else {
		st.timer.Reset(time.Until(at))
	}
	st.due = at
}

// timerC is the timer's channel while it is armed, else nil (never ready).
func (st *Stream) timerC() <-chan time.Time {
	if st.due.IsZero() {
		return nil
	}
	return st.timer.C
}
