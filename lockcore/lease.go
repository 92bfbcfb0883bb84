package lockcore

import "time"

// Lease identifies one grant of a lock: who holds it, under which random lease ID, and its fence.
type Lease struct {
	Lock  string `json:"lock"` // the lock's, the semaphore's or the election's name
	Owner string `json:"owner"`
	ID    string `json:"lease"`
	Fence int64  `json:"fence"`
	// Principal is the authenticated principal that took the lease ("" without authentication,
	// and then absent from the payload, so that such tokens keep their form). It is signed with
	// the rest: the handlers refuse a token presented by any other principal.
	Principal string `json:"principal,omitempty"`
	// Kind is not in the payload: a semaphore's and an election's tokens are signed in domains of
	// their own, so that none passes for another kind's.
	Kind Kind `json:"-"`
}

// Ref is the lock or semaphore l is a lease on.
func (l Lease) Ref() Ref { return Ref{l.Kind, l.Lock} }

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

	// claim is IdempotencyKey's claim for the request's scripts to take (idempotency_claims.go).
	claim *idemClaim
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
