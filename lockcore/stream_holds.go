package lockcore

import (
	"context"
	"time"
)

// What a Stream knows of its lock's holds (fence and mode -> owner and estimated expiry), how
// events and snapshots change it, and the expiry timer that checks the lock when the earliest hold
// should run out: the part of a stream that turns Redis's messages into events (see Stream in
// events.go).

type holdKey struct {
	fence int64
	mode  Mode
}

type knownHold struct {
	owner   string
	expires time.Time // the gateway's estimate
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

// applyMsg applies one message of the lock's events.
func (st *Stream) applyMsg(m *eventMsg) {
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

// reread runs when the earliest known hold should have run out: it reads the lock again, applies
// the events that came before that reading, and reports the holds gone without an event as
// expired (renewals publish nothing: a hold still there just has a later expiry now).
func (st *Stream) reread() {
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
			case <-st.hub.e.ctx.Done():
				return
			}
		}
		if m.epoch == st.epoch && m.seq > snap.seq {
			st.held = append([]*eventMsg{m}, st.held...)
			st.stale = true // the events up to the snapshot's were lost on the way
			continue
		}
		st.applyMsg(m)
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
