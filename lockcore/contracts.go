package lockcore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The contracts of the scripts on one lock: for each, a Go type of its own arguments that makes
// its KEYS and ARGV in the order its Lua header documents (after lib.lua's, see lockCall), and a
// decoder of its reply into named outcomes. A call also says, in words, what it is about (see
// about), for RedLock to make its masters' replies one.

// idemKey is a request's Idempotency-Key and how long its record is kept ("" key: none), and the
// key's claim when the request's script takes it (see idempotency_claims.go).
type idemKey struct {
	key    string
	window time.Duration
	claim  *idemClaim
}

// claiming returns i with claim c (nil: none, or taken apart).
func (i idemKey) claiming(c *idemClaim) idemKey {
	i.claim = c
	return i
}

// on returns c, a call of a script that opens with claim.lua, carrying i's claim if it has one.
func (i idemKey) on(c call) call {
	if i.claim == nil {
		return c
	}
	c.keys = append(slices.Clip(c.keys), i.claim.key)
	c.args = append(slices.Clip(c.args), claimMark, i.claim.fingerprint, i.claim.ms)
	return c
}

// ms is the record's window argument: "0" without a key.
func (i idemKey) ms() string {
	if i.key == "" {
		return "0"
	}
	return ms(i.window)
}

// acquireArgs is acquire.lua's call: a new lease asks for the lock, at once or queueing.
type acquireArgs struct {
	lease    string
	ttl      time.Duration
	owner    string
	watchdog bool
	waiting  bool   // mode 'wait': queue behind the holders (else 'try')
	replica  string // the waiter's gateway, which hand-offs are published to
	// arrival is the place to queue at (µs); 0: the place ticketID keeps (taken once), else now.
	arrival  int64
	ticketID string
	maxHold  time.Duration
	idem     idemKey
	mode     Mode
	permits  int64 // a semaphore's size; 0 for a lock
}

func (a acquireArgs) call(lc *lockCall) call {
	mode := "try"
	if a.waiting {
		mode = "wait"
	}
	c := lc.call(scripts.acquire, []string{lc.keys.ticket(a.ticketID), lc.keys.idempotency("acquire", "", a.idem.key)},
		a.lease, ms(a.ttl), a.owner, flag(a.watchdog), mode, a.replica, strconv.FormatInt(a.arrival, 10), ms(a.maxHold),
		a.idem.ms(), a.mode.arg(), strconv.FormatInt(a.permits, 10))
	c.about = about{lease: a.lease, ttl: a.ttl, mode: a.mode.arg(), waiting: a.waiting, idempotent: a.idem.key != ""}
	return a.idem.on(c)
}

// acquire.lua's statuses.
const (
	acquireHeld    = 0
	acquireGranted = 1
	acquireQueued  = 2
	// acquireReplayed: a retry with the same Idempotency-Key of a granted request, whose lease
	// still holds the lock; acquireReplayedLost: whose lease no longer does.
	acquireReplayed     = 3
	acquireReplayedLost = 4
	// acquireMismatch: a semaphore someone holds or waits on has another size.
	acquireMismatch = 5
)

// acquireReply is acquire.lua's reply.
type acquireReply struct {
	status  int64 // acquireHeld, acquireGranted, acquireQueued, acquireReplayed, acquireReplayedLost (acquireMismatch is an error)
	fence   int64
	used    int64         // a semaphore's permits in use (granted, replayed)
	pttl    time.Duration // the holder's remaining TTL (held, queued)
	arrival int64         // the arrival to keep when queueing again (queued)
	lease   string        // the lease a replayed grant went to (pttl: what it has left)
}

// decodeAcquire reads acquire.lua's reply to a request for lock.
func decodeAcquire(lock string, reply []rueidis.RedisMessage) (acquireReply, error) {
	if len(reply) == 5 && reply[2].IsString() { // {acquireReplayed, fence, lease, pttl, used}
		fence, err := reply[1].AsInt64()
		lease, err2 := reply[2].ToString()
		pttl, err3 := reply[3].AsInt64()
		used, err4 := reply[4].AsInt64()
		if err = errors.Join(err, err2, err3, err4); err != nil {
			return acquireReply{}, unexpectedReply("acquire", lock, reply, err)
		}
		return acquireReply{status: acquireReplayed, fence: fence, lease: lease, used: used,
			pttl: time.Duration(max(pttl, 0)) * time.Millisecond}, nil
	}
	r, err := ints(reply)
	if err != nil || len(r) < 1 || r[0] < acquireHeld || r[0] > acquireMismatch ||
		(r[0] != acquireReplayedLost && len(r) < 2) || (r[0] == acquireQueued && len(r) != 3) ||
		(r[0] == acquireGranted && len(r) != 3) {
		return acquireReply{}, unexpectedReply("acquire", lock, r, err)
	}
	out := acquireReply{status: r[0]}
	switch r[0] {
	case acquireGranted:
		out.fence, out.used = r[1], r[2]
	case acquireQueued:
		out.pttl, out.arrival = time.Duration(max(r[1], 0))*time.Millisecond, r[2]
	case acquireHeld:
		out.pttl = time.Duration(max(r[1], 0)) * time.Millisecond
	case acquireMismatch:
		return acquireReply{}, &PermitsMismatchError{Semaphore: lock, Permits: r[1]}
	}
	return out, nil
}

// reenterArgs is reenter.lua's call: a lease that holds takes one more hold.
type reenterArgs struct {
	lease   string
	ttl     time.Duration
	idem    idemKey
	mode    Mode
	permits int64
}

func (a reenterArgs) call(lc *lockCall) call {
	c := lc.call(scripts.reenter, []string{lc.keys.idempotency("reenter", a.lease, a.idem.key)},
		a.lease, ms(a.ttl), a.idem.ms(), a.mode.arg(), strconv.FormatInt(a.permits, 10))
	c.about = about{lease: a.lease, ttl: a.ttl, mode: a.mode.arg(), idempotent: a.idem.key != ""}
	return a.idem.on(c)
}

// reenter.lua's outcomes.
const (
	reentered = iota
	reenterLost
	reenterUpgradeRefused
	reenterMismatch
)

// reenterReply is reenter.lua's reply.
type reenterReply struct {
	outcome  int
	holds    int64
	fence    int64 // the fence of the hold re-entered
	watchdog bool
	ttl      time.Duration // what the lease has left now (a replayed answer's too)
	used     int64
	size     int64 // reenterMismatch: the semaphore's size
}

// decodeReenter reads reenter.lua's reply on lock.
func decodeReenter(lock string, reply []rueidis.RedisMessage) (reenterReply, error) {
	r, err := ints(reply)
	if err == nil && len(r) == 4 { // an answer a build before 2026-11 remembered for a retry: no used count
		r = append(r, 0)
	}
	if err != nil || (len(r) != 1 && len(r) != 2 && len(r) != 5) {
		return reenterReply{}, unexpectedReply("reenter", lock, r, err)
	}
	switch {
	case r[0] == 0:
		return reenterReply{outcome: reenterLost}, nil
	case r[0] == -1:
		return reenterReply{outcome: reenterUpgradeRefused}, nil
	case r[0] == -2 && len(r) == 2:
		return reenterReply{outcome: reenterMismatch, size: r[1]}, nil
	case len(r) != 5:
		return reenterReply{}, unexpectedReply("reenter", lock, r, nil)
	}
	return reenterReply{outcome: reentered, holds: r[0], fence: r[1], watchdog: r[2] == 1,
		ttl: time.Duration(r[3]) * time.Millisecond, used: r[4]}, nil
}

// releaseArgs is release.lua's call: a lease gives back one hold.
type releaseArgs struct {
	lease string
	idem  idemKey
	which string // "" (its exclusive hold if any, else its shared one), "x" or "s"
	here  string // the replica whose waiters the script hands holds to with their TTLs ("": none)
}

func (a releaseArgs) call(lc *lockCall) call {
	c := lc.call(scripts.release, []string{lc.keys.idempotency("release", a.lease, a.idem.key)}, a.lease, a.idem.ms(), a.which, a.here)
	c.about = about{lease: a.lease, mode: a.which, idempotent: a.idem.key != ""}
	return a.idem.on(c)
}

// releaseReply is release.lua's reply.
type releaseReply struct {
	lost     bool  // the lease does not hold (that way)
	holds    int64 // the hold's count left
	shared   bool  // the hold given back (or decremented) is a shared one
	watchdog bool  // the lease holds nothing now and had a watchdog duty, to drop
	other    bool  // the lease still holds the lock the other way (a downgrade's shared hold)
	// handed are the holds the script gave the waiters of releaseArgs.here, with their TTLs, for
	// the caller to hand over.
	handed []handedHold
}

// handedHold is a hold a release handed to one of the releasing gateway's own waiters.
type handedHold struct {
	lease string
	fence int64
}

// decodeRelease reads release.lua's reply on lock.
func decodeRelease(lock string, reply []rueidis.RedisMessage) (releaseReply, error) {
	// {-1} | {holds, shared} | {0, watchdog (2: the lease holds the lock the other way), shared}
	// | {0, watchdog, shared, lease, fence, ...}
	var handed []handedHold
	if len(reply) > 3 {
		if len(reply)%2 == 0 {
			return releaseReply{}, unexpectedReply("release", lock, nil, fmt.Errorf("%d elements", len(reply)))
		}
		handed = make([]handedHold, 0, (len(reply)-3)/2)
		for i := 3; i < len(reply); i += 2 {
			lease, err := reply[i].ToString()
			if err != nil {
				return releaseReply{}, unexpectedReply("release", lock, nil, err)
			}
			fence, err := reply[i+1].AsInt64()
			if err != nil {
				return releaseReply{}, unexpectedReply("release", lock, nil, err)
			}
			handed = append(handed, handedHold{lease: lease, fence: fence})
		}
		reply = reply[:3]
	}
	r, err := ints(reply)
	if err != nil || len(r) < 1 {
		return releaseReply{}, unexpectedReply("release", lock, r, err)
	}
	if r[0] < 0 {
		return releaseReply{lost: true}, nil
	}
	// Answers a build before 2026-11 remembered for a retry carry no mode: they were exclusive.
	return releaseReply{holds: r[0],
		shared:   (r[0] > 0 && len(r) == 2 && r[1] == 1) || (r[0] == 0 && len(r) == 3 && r[2] == 1),
		watchdog: r[0] == 0 && len(r) > 1 && r[1] == 1,
		other:    r[0] == 0 && len(r) > 1 && r[1] == 2,
		handed:   handed}, nil
}

// renewArgs is renew.lua's call: a lease's TTL is set, or a waiter confirms a hand-off.
type renewArgs struct {
	lease      string
	ttl        time.Duration // 0: keep the lease's
	confirming bool          // a waiter's confirmation of the hold handed to it
}

func (a renewArgs) call(lc *lockCall) call {
	c := lc.call(scripts.renew, nil, a.lease, ms(a.ttl))
	c.about = about{lease: a.lease, ttl: a.ttl, waiting: a.confirming}
	return c
}

// renewReply is renew.lua's reply.
type renewReply struct {
	lost     bool // the lease does not hold
	holds    int64
	fence    int64
	ttl      time.Duration
	watchdog bool
	shared   bool
	used     int64
	size     int64
}

// decodeRenew reads renew.lua's reply on lock.
func decodeRenew(lock string, reply []rueidis.RedisMessage) (renewReply, error) {
	r, err := ints(reply) // {0} | {holds, fence, ttl, watchdog, shared, used, size}
	if err != nil || (len(r) != 1 && len(r) != 7) {
		return renewReply{}, unexpectedReply("renew", lock, r, err)
	}
	if r[0] == 0 {
		return renewReply{lost: true}, nil
	}
	return renewReply{holds: r[0], fence: r[1], ttl: time.Duration(r[2]) * time.Millisecond, watchdog: r[3] == 1,
		shared: r[4] == 1, used: r[5], size: r[6]}, nil
}

// dequeueArgs is dequeue.lua's call: a waiter leaves the line.
type dequeueArgs struct {
	lease    string
	ticket   time.Duration // how long its place is kept under ticketID (0: not kept)
	ticketID string
	arrival  int64 // its arrival as the gateway knows it (0: unknown)
}

func (a dequeueArgs) call(lc *lockCall) call {
	c := lc.call(scripts.dequeue, []string{lc.keys.ticket(a.ticketID)}, a.lease, ms(a.ticket), strconv.FormatInt(a.arrival, 10))
	c.about = about{lease: a.lease}
	return c
}

// dequeueReply is dequeue.lua's reply.
type dequeueReply struct {
	handed   bool          // a hold had reached the waiter: it was passed on
	holdLeft time.Duration // not handed: until the earliest hold runs out (negative: none)
	ticketed bool          // its place was kept for ticket
}

// decodeDequeue reads dequeue.lua's reply on lock.
func decodeDequeue(lock string, reply []rueidis.RedisMessage) (dequeueReply, error) {
	r, err := ints(reply) // {1, ticketed} | {0, ms, ticketed}
	if err == nil && (len(r) < 2 || (r[0] == 0 && len(r) != 3)) {
		err = unexpectedReply("dequeue", lock, r, nil)
	}
	if err != nil {
		return dequeueReply{}, err
	}
	out := dequeueReply{handed: r[0] == 1, ticketed: r[len(r)-1] == 1}
	if r[0] == 0 {
		out.holdLeft = time.Duration(r[1]) * time.Millisecond
	}
	return out, nil
}

// unexpectedReply reports a script reply lockcore cannot read; err, when not nil, says why.
func unexpectedReply(op, lock string, reply any, err error) error {
	if err != nil {
		return fmt.Errorf("%s %q: unexpected reply %v: %w", op, lock, reply, err)
	}
	return fmt.Errorf("%s %q: unexpected reply %v", op, lock, reply)
}

// lockCall is what every call of a lib.lua script on ref starts with: its keys and common ARGV
// [grants channel prefix, claim_ms, liveness_ms, fence_ttl_ms, the deployment's clock, kind].
func (e *engine) lockCall(ref Ref) *lockCall {
	k := e.keys(ref)
	return &lockCall{keys: k, common: e.commonArgs(k.lock, e.space.kindArg(ref))}
}

// commonArgs is the common ARGV of a lib.lua script on the lock with key lockKey, of kind
// (lockSpace.kindArg).
func (e *engine) commonArgs(lockKey, kind string) []string {
	return []string{e.dep.grants(lockKey), e.space.claimMs, e.space.livenessMs, e.space.fenceTTLMs, e.dep.clock(), kind}
}
