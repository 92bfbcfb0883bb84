package lockcore

import (
	"context"
	"errors"
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
func (st *Stream) Done() <-chan struct{} { return st.hub.e.ctx.Done() }

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
			st.applyMsg(m)
			continue
		}
		msgs := st.msgs
		if st.stale {
			msgs = nil // keep them for after the resync
		}
		select {
		case m := <-msgs:
			st.applyMsg(m)
		case <-st.wake:
		case <-st.timerC():
			st.due = time.Time{}
			if st.stale {
				st.retrying = false
			} else {
				st.reread()
			}
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-st.hub.e.ctx.Done():
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
	k := st.hub.e.keys(st.ref)
	taken := time.Now()
	reply, err := st.hub.e.dep.run(ctx, call{script: scripts.watchSnapshot, keys: []string{k.lock, k.q, k.qd, k.sh, k.shm, k.rs, watchKey(k.lock)},
		args: []string{st.lease, string(st.hub.e.space.layoutOf(st.ref)), st.hub.ws.replica, ms(watchTTL)}})
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
