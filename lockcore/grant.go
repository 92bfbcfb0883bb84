package lockcore

import (
	"context"
	"errors"
	"time"
)

// AcquireRequest asks for a lock, or a semaphore's permit. Validation of its ranges is the
// caller's; lockcore checks only what needs the token or the ticket.
type AcquireRequest struct {
	Lock  string // the lock's (or the semaphore's) name
	Kind  Kind   // KindLock (the zero value) or KindSemaphore
	Mode  Mode   // a lock's: Exclusive (the zero value) or Shared; a semaphore's permits are shared
	Owner string
	// Permits is a semaphore's size: set by whoever acquires while nobody holds or waits, and
	// checked against it otherwise (*PermitsMismatchError).
	Permits  int64
	TTL      time.Duration
	Wait     time.Duration // 0: try once
	Watchdog bool
	// MaxHold bounds a watchdog lease: it is not renewed past MaxHold after its grant.
	MaxHold time.Duration
	// Token, when set, re-enters the lease it names instead of asking for a new one.
	Token string
	// QueueTicket, when set on a waiting request, resumes the place in the queue of the wait that
	// was handed it (HeldError.QueueTicket), if that wait ended less than TicketGrace ago.
	QueueTicket string
	// IdempotencyKey, when set, makes a retry of this request (same key, same owner or token)
	// within IdempotencyWindow answer as the first did and change nothing: a retried new acquire
	// gets the same lease while it holds the lock (ErrLeaseLost after), a retried re-entry adds no
	// second hold.
	IdempotencyKey string
	// Principal is the authenticated caller ("" without authentication), minted into a new
	// lease's token. A re-entry keeps its token's.
	Principal string
	// HeldCap is Principal's own cap on its holds, in place of Options.MaxHeld: 0 keeps that
	// default, -1 is no cap. It applies only while the Service counts holds (Options.MaxHeld).
	HeldCap int
}

// Grant is a held lease as the caller should see it.
type Grant struct {
	Lease
	Mode      Mode // the hold granted (a semaphore's permit: Shared)
	Token     string
	TTL       time.Duration
	ExpiresAt time.Time // conservative: measured from before the Redis call
	Holds     int64
	Watchdog  bool
	Reentered bool // true when an existing lease was re-entered rather than newly granted
	// A semaphore's: its size, and the permits in use just after this grant.
	Permits, Used int64
	// Waited is how long the request stood in the wait queue before this grant (0: granted at once).
	Waited time.Duration
}

// ref is the lock or semaphore req asks for.
func (req AcquireRequest) ref() Ref { return Ref{req.Kind, req.Lock} }

// mode is the hold req asks for: a semaphore's permits are shared holds.
func (req AcquireRequest) mode() Mode {
	if req.Kind == KindSemaphore || req.Mode == Shared {
		return Shared
	}
	return Exclusive
}

func (s *Service) newGrant(req AcquireRequest, lease string, r acquireReply, start time.Time) Grant {
	l := Lease{Lock: req.Lock, Kind: req.Kind, Owner: req.Owner, ID: lease, Fence: r.fence, Principal: req.Principal}
	g := Grant{Lease: l, Mode: req.mode(), Token: s.tokens.Mint(l), TTL: req.TTL, ExpiresAt: start.Add(s.dep.validity(req.TTL)), Holds: 1,
		Watchdog: req.Watchdog, Used: r.used}
	if req.Kind == KindSemaphore {
		g.Permits = req.Permits
	}
	return g
}

// runAcquire runs acquire.lua, trying once or (waiting) queueing. A waiter queues at arrival (µs, Redis
// time) when it is not 0, else at the place queue ticket ticketID keeps (taken once), else now.
// With replica acks, a grant (or a replayed one) the replicas did not acknowledge is returned
// with a *notAckedError; any other answer needs no acknowledgement and is returned as it is.
func (s *Service) runAcquire(ctx context.Context, req AcquireRequest, lease string, waiting bool, arrival int64, ticketID string) (acquireReply, error) {
	a := acquireArgs{lease: lease, ttl: req.TTL, owner: req.Owner, watchdog: req.Watchdog, waiting: waiting,
		replica: s.waiters.replica, arrival: arrival, ticketID: ticketID, maxHold: req.MaxHold, idem: s.idem(req.IdempotencyKey),
		mode: req.mode(), permits: req.Permits}
	reply, err := s.dep.run(ctx, a.call(s.lockCall(req.ref())))
	if err != nil && !notAcked(err) {
		return acquireReply{}, err
	}
	r, derr := decodeAcquire(req.Lock, reply)
	if derr != nil {
		return acquireReply{}, derr
	}
	if err != nil && (r.status == acquireGranted || r.status == acquireReplayed) {
		return r, err
	}
	return r, nil
}

// notAcked reports whether err says the replicas did not acknowledge a write in time.
func notAcked(err error) bool {
	var na *notAckedError
	return errors.As(err, &na)
}
