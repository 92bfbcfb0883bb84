package lockcore

import (
	"time"

	"github.com/redis/rueidis"
)

// State is a lock or semaphore as Inspect saw it.
type State struct {
	Ref Ref
	// Exclusive is the exclusive holder of a lock, nil when there is none.
	Exclusive *Holder
	// Shared are the first 100 shared holders (a lock's readers, a semaphore's permits), soonest to
	// expire first (inspect.lua lists no more); SharedCount counts them all.
	Shared      []Holder
	SharedCount int64
	Waiters     int64
	// Waiting are the first ListedWaiters live waiters, in line order: only List fills it (Inspect
	// leaves it nil), for the entries it lists with waiters.
	Waiting []Waiter
	Permits int64 // a semaphore's size (0 when nobody holds or waits)
	// Yours is set only when Inspect was given a token: whether that lease holds (either way).
	Yours *bool
	// Redisson are the first 100 holders of a name shared with Redisson that are Redisson's own
	// clients, not the gateway's leases (see layout.go).
	Redisson []RedissonHolder
}

// Held reports whether anyone holds it.
func (st State) Held() bool { return st.Exclusive != nil || st.SharedCount > 0 || len(st.Redisson) > 0 }

// holders returns every hold st lists: the exclusive one, if any, then the shared ones.
func (st State) holders() []Holder {
	out := make([]Holder, 0, len(st.Shared)+1)
	if st.Exclusive != nil {
		out = append(out, *st.Exclusive)
	}
	return append(out, st.Shared...)
}

// OldestHold is how long ago the oldest hold st lists was granted (0 when none), from its fence
// (see heldSince).
func (st State) OldestHold(now time.Time) time.Duration {
	var oldest time.Duration
	for _, h := range st.holders() {
		oldest = max(oldest, heldSince(h.Fence, now))
	}
	return oldest
}

// Holder is one lease's hold as Inspect saw it.
type Holder struct {
	Lease    string
	Owner    string
	Fence    int64
	Holds    int64
	TTL      time.Duration // remaining
	Watchdog bool
	HoldLeft time.Duration // how much longer the watchdog renews the lease
}

// HeldFor is how long ago h was granted, from its fence (see heldSince).
func (h Holder) HeldFor(now time.Time) time.Duration { return heldSince(h.Fence, now) }

// ListedWaiters is how many waiters List reports per entry (State.Waiting), at most.
const ListedWaiters = 20

// Waiter is one request in a lock's or semaphore's line, as List saw it.
type Waiter struct {
	// Lease is the waiting lease: "m-…" for a multi-lock waiting for this member (see GroupOf).
	Lease string
	Owner string
	Mode  Mode // a semaphore's waiters are Shared
	// Since is its arrival in the line (Redis time): a waiter coming back with its queue ticket
	// keeps it. Waited is how long before the listing read the line, on the same clock.
	Since  time.Time
	Waited time.Duration
}

// replyValues reads a script reply's elements: Lua numbers arrive as int64, strings (owners too) as
// strings.
func replyValues(reply []rueidis.RedisMessage) []any {
	r := make([]any, len(reply))
	for i := range reply {
		if v, err := reply[i].ToInt64(); err == nil {
			r[i] = v
		} else if v, err := reply[i].ToString(); err == nil {
			r[i] = v
		}
	}
	return r
}

// readState reads inspect.lua's reply: {waiters, size, yours, exclusive, [holder] if exclusive,
// shared_count, [holder]...}, a holder being lease, owner, fence, holds, pttl, watchdog,
// hold_left_ms.
func readState(ref Ref, r []any) (State, bool) {
	st := State{Ref: ref}
	if len(r) < 5 {
		return st, false
	}
	var ok1, ok2 bool
	st.Waiters, ok1 = r[0].(int64)
	st.Permits, ok2 = r[1].(int64)
	exclusive, ok3 := r[3].(int64)
	if !ok1 || !ok2 || !ok3 {
		return st, false
	}
	r = r[4:]
	if exclusive == 1 {
		h, ok := readHolder(r)
		if !ok {
			return st, false
		}
		st.Exclusive, r = &h, r[7:]
	}
	if len(r) < 1 {
		return st, false
	}
	var ok bool
	if st.Redisson, r, ok = readRedissonHolders(r); !ok || len(r) < 1 {
		return st, false
	}
	count, ok := r[0].(int64)
	if !ok || (len(r)-1)%7 != 0 {
		return st, false
	}
	st.SharedCount = count
	for r = r[1:]; len(r) >= 7; r = r[7:] {
		h, ok := readHolder(r)
		if !ok {
			return st, false
		}
		st.Shared = append(st.Shared, h)
	}
	return st, true
}

func readHolder(r []any) (Holder, bool) {
	if len(r) < 7 {
		return Holder{}, false
	}
	lease, ok1 := r[0].(string)
	owner, ok2 := r[1].(string)
	fence, ok3 := r[2].(int64)
	holds, ok4 := r[3].(int64)
	pttl, ok5 := r[4].(int64)
	wd, ok6 := r[5].(int64)
	left, ok7 := r[6].(int64)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return Holder{}, false
	}
	return Holder{Lease: lease, Owner: owner, Fence: fence, Holds: holds, TTL: time.Duration(pttl) * time.Millisecond,
		Watchdog: wd == 1, HoldLeft: time.Duration(left) * time.Millisecond}, true
}
