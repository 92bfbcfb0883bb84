package lockcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
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

// Mode is how a lock is held: exclusively (one holder) or shared (any number of shared holders,
// no exclusive one).
type Mode string

const (
	Exclusive Mode = "exclusive"
	Shared    Mode = "shared"
)

// arg is the mode's script argument.
func (m Mode) arg() string {
	if m == Shared {
		return "s"
	}
	return "x"
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

// Acquire grants req.Lock to a new lease, or re-enters the lease req.Token names. With req.Wait
// set (and no token) it waits up to req.Wait in the lock's FIFO queue (see wait.go).
//
// It returns a *HeldError (ErrHeld) when another lease holds the lock, ErrLeaseLost when the
// re-entered lease no longer holds it, ErrInvalidToken, ErrInvalidTicket or ErrInvalid for a bad
// token, ticket or owner, ErrTooManyWaiters when this Service holds its cap of waiting requests,
// and ErrUnavailable when Redis does not answer or the Service closes during the wait. If ctx
// ends after Redis granted the lock, the grant is undone before returning ctx's error, so a
// client that went away holds nothing, unless the request carries an IdempotencyKey: then the
// grant is kept for the retry that collects it.
func (s *Service) Acquire(ctx context.Context, req AcquireRequest) (Grant, error) {
	if err := s.notOnRedLock(req.ref()); err != nil {
		return Grant{}, err
	}
	g, err := s.acquireAny(ctx, req)
	kind := req.Kind.String()
	switch {
	case err != nil:
		s.observeRefusal(kind, err)
	case g.Reentered:
		s.obs.Granted(kind, g.Mode, GrantReentry, 0)
	case g.Waited > 0:
		s.obs.Granted(kind, g.Mode, GrantHandOff, g.Waited)
	default:
		s.obs.Granted(kind, g.Mode, GrantNew, 0)
	}
	return g, err
}

func (s *Service) acquireAny(ctx context.Context, req AcquireRequest) (Grant, error) {
	if req.Token != "" {
		g, err := s.reenterLease(ctx, req)
		if err != nil {
			return Grant{}, err
		}
		// Counted to its new TTL's end at least (a watchdog lease's count, to its max hold, is
		// never shortened).
		s.extendHeld(ctx, g.Principal, g.TTL+heldSlack, heldMember(req.ref(), g.ID))
		return s.settle(ctx, req, g)
	}
	lease := uuid.NewString()
	member := heldMember(req.ref(), lease)
	if err := s.countHeld(ctx, req.Principal, req.HeldCap, heldSpan(req.TTL, req.Wait, req.Watchdog, req.MaxHold), member); err != nil {
		return Grant{}, err
	}
	var (
		g   Grant
		err error
	)
	if req.Wait > 0 {
		g, err = s.acquireWaiting(ctx, req, lease)
	} else if g, err = s.acquireNew(ctx, req, lease); err == nil {
		g, err = s.settle(ctx, req, g)
	}
	// Not granted, or a retry granted the first request's lease (counted by that request).
	if err != nil && !grantUnknown(err, req.IdempotencyKey) || err == nil && g.ID != lease {
		s.uncountHeld(ctx, req.Principal, member)
	}
	return g, err
}

// settle finishes a grant: a new watchdog lease is enrolled for renewal, and g is undone when ctx
// ended meanwhile (the caller went away; ctx's error is returned) unless the request carries an
// Idempotency-Key: its retry collects the grant (giving it back would answer that retry 410, or
// hand it a lease about to be released).
func (s *Service) settle(ctx context.Context, req AcquireRequest, g Grant) (Grant, error) {
	if g.Watchdog && !g.Reentered {
		if err := s.enroll(ctx, g); err != nil {
			s.undo(ctx, g) // a watchdog lease nobody would renew is worse than none
			return Grant{}, err
		}
	}
	if !g.Watchdog && s.mayOutlive(g.Lease, g.TTL) { // a long TTL, or a late re-entry (see long_holds.go)
		s.trackAged(ctx, g.Lease)
	}
	if err := ctx.Err(); err != nil {
		if req.IdempotencyKey == "" {
			s.undo(ctx, g)
		}
		return Grant{}, err
	}
	return g, nil
}

// acquireNew tries once: the lock goes to new lease lease if it is free and nobody is queued.
func (s *Service) acquireNew(ctx context.Context, req AcquireRequest, lease string) (Grant, error) {
	start := time.Now()
	r, err := s.runAcquire(ctx, req, lease, "try", 0, "")
	if err != nil {
		// An unacknowledged grant is given back, unless the request carries an Idempotency-Key:
		// then its retry replays it (and waits for the replicas again), as settle keeps a grant
		// whose caller left.
		if notAcked(err) && r.status == acquireGranted && req.IdempotencyKey == "" {
			s.undoUnacked(ctx, Lease{Lock: req.Lock, Kind: req.Kind, ID: lease}, req.mode())
		}
		return Grant{}, err
	}
	switch r.status {
	case acquireHeld:
		return Grant{}, &HeldError{Lock: req.Lock, Kind: req.Kind, RetryAfter: r.pttl}
	case acquireReplayed: // the first request's lease, with what it has left
		lease, req.TTL = r.lease, r.pttl
	case acquireReplayedLost:
		return Grant{}, fmt.Errorf("%w: %s %q: the lease the first request with this Idempotency-Key was granted", ErrLeaseLost, req.Kind, req.Lock)
	}
	return s.newGrant(req, lease, r, start), nil
}

// rememberGrant keeps a waiter's grant for retries of its request with the same Idempotency-Key
// (a grant acquire.lua made keeps itself). A failure only costs a retry its idempotency.
func (s *Service) rememberGrant(ctx context.Context, req AcquireRequest, g Grant) {
	if req.IdempotencyKey == "" {
		return
	}
	k := s.keys(req.ref())
	window := max(s.idemWindow, g.TTL)
	var err error
	for _, c := range s.clients() {
		err = cmp.Or(err, c.Do(context.WithoutCancel(ctx), c.B().Set().Key(k.latch("acquire", "", req.IdempotencyKey)).
			Value(g.ID+" "+req.Owner).Px(window).Build()).Error())
	}
	if err != nil {
		s.log.Warn("remembering a grant for its idempotent retries failed", req.Kind.String(), req.Lock, "err", err)
	}
}

func (s *Service) newGrant(req AcquireRequest, lease string, r acquireReply, start time.Time) Grant {
	l := Lease{Lock: req.Lock, Kind: req.Kind, Owner: req.Owner, ID: lease, Fence: r.fence, Principal: req.Principal}
	g := Grant{Lease: l, Mode: req.mode(), Token: s.tokens.Mint(l), TTL: req.TTL, ExpiresAt: start.Add(s.validity(req.TTL)), Holds: 1,
		Watchdog: req.Watchdog, Used: r.used}
	if req.Kind == KindSemaphore {
		g.Permits = req.Permits
	}
	return g
}

// acquireReply is acquire.lua's reply.
type acquireReply struct {
	status  int64 // acquireHeld, acquireGranted, acquireQueued, acquireReplayed, acquireReplayedLost (acquireMismatch is an error)
	fence   int64
	used    int64         // a semaphore's permits in use (granted, replayed)
	pttl    time.Duration // the holder's remaining TTL (held, queued)
	arrival int64         // the arrival to keep when queueing again (queued)
	lease   string        // the lease a replayed grant went to (pttl: what it has left)
}

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

// runAcquire runs acquire.lua in mode "try" or "wait". A waiter queues at arrival (µs, Redis
// time) when it is not 0, else at the place queue ticket ticketID keeps (taken once), else now.
// With replica acks, a grant (or a replayed one) the replicas did not acknowledge is returned
// with a *notAckedError; any other answer needs no acknowledgement and is returned as it is.
func (s *Service) runAcquire(ctx context.Context, req AcquireRequest, lease, mode string, arrival int64, ticketID string) (acquireReply, error) {
	k := s.keys(req.ref())
	reply, err := s.runWithKeys(ctx, s.acquire, req.ref(), []string{k.ticket(ticketID), k.latch("acquire", "", req.IdempotencyKey)},
		lease, ms(req.TTL), req.Owner, flag(req.Watchdog), mode, s.waiters.replica,
		strconv.FormatInt(arrival, 10), ms(req.MaxHold), s.idemMs(req.IdempotencyKey), req.mode().arg(),
		strconv.FormatInt(req.Permits, 10))
	if err != nil && !notAcked(err) {
		return acquireReply{}, err
	}
	r, derr := s.decodeAcquire(req, reply)
	if derr != nil {
		return acquireReply{}, derr
	}
	if err != nil && (r.status == acquireGranted || r.status == acquireReplayed) {
		return r, err
	}
	return r, nil
}

// decodeAcquire reads acquire.lua's reply.
func (s *Service) decodeAcquire(req AcquireRequest, reply []rueidis.RedisMessage) (acquireReply, error) {
	if len(reply) == 5 && reply[2].IsString() { // {acquireReplayed, fence, lease, pttl, used}
		fence, err := reply[1].AsInt64()
		lease, err2 := reply[2].ToString()
		pttl, err3 := reply[3].AsInt64()
		used, err4 := reply[4].AsInt64()
		if err = errors.Join(err, err2, err3, err4); err != nil {
			return acquireReply{}, unexpectedReply("acquire", req.Lock, reply, err)
		}
		return acquireReply{status: acquireReplayed, fence: fence, lease: lease, used: used,
			pttl: time.Duration(max(pttl, 0)) * time.Millisecond}, nil
	}
	r, err := ints(reply)
	if err != nil || len(r) < 1 || r[0] < acquireHeld || r[0] > acquireMismatch ||
		(r[0] != acquireReplayedLost && len(r) < 2) || (r[0] == acquireQueued && len(r) != 3) ||
		(r[0] == acquireGranted && len(r) != 3) {
		return acquireReply{}, unexpectedReply("acquire", req.Lock, r, err)
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
		return acquireReply{}, &PermitsMismatchError{Semaphore: req.Lock, Permits: r[1]}
	}
	return out, nil
}

func (s *Service) reenterLease(ctx context.Context, req AcquireRequest) (Grant, error) {
	l, err := s.tokens.Parse(req.Token, req.ref())
	if err != nil {
		return Grant{}, err
	}
	if l.Owner != req.Owner {
		return Grant{}, fmt.Errorf("%w: owner %q does not match the lease token's owner %q", ErrInvalid, req.Owner, l.Owner)
	}
	start := time.Now()
	reply, err := s.runWithKeys(ctx, s.reenter, req.ref(), []string{s.keys(req.ref()).latch("reenter", l.ID, req.IdempotencyKey)},
		l.ID, ms(req.TTL), s.idemMs(req.IdempotencyKey), req.mode().arg(), strconv.FormatInt(req.Permits, 10))
	if err != nil && !notAcked(err) {
		return Grant{}, err
	}
	acked := err
	r, err := ints(reply)
	if err == nil && len(r) == 4 { // an answer an older build remembered for a retry: no used count
		r = append(r, 0)
	}
	if err != nil || (len(r) != 1 && len(r) != 2 && len(r) != 5) {
		return Grant{}, unexpectedReply("reenter", req.Lock, r, err)
	}
	switch {
	case r[0] == 0:
		return Grant{}, fmt.Errorf("%w: %s %q, lease %s", ErrLeaseLost, req.Kind, req.Lock, l.ID)
	case r[0] == -1:
		return Grant{}, fmt.Errorf("%w: lock %q: the lease holds it shared", ErrUpgradeRefused, req.Lock)
	case r[0] == -2 && len(r) == 2:
		return Grant{}, &PermitsMismatchError{Semaphore: req.Lock, Permits: r[1]}
	case len(r) != 5:
		return Grant{}, unexpectedReply("reenter", req.Lock, r, nil)
	case acked != nil: // the re-entry took one more hold: that hold, and only it, is given back
		if req.IdempotencyKey == "" { // with a key, the retry replays the re-entry instead
			s.undoUnacked(ctx, l, req.mode())
		}
		return Grant{}, acked
	}
	ttl := time.Duration(r[3]) * time.Millisecond // a replayed answer's: what the lease has left
	g := Grant{Lease: l, Mode: req.mode(), Token: req.Token, TTL: ttl, ExpiresAt: start.Add(s.validity(ttl)), Holds: r[0],
		Watchdog: r[2] == 1, Reentered: true, Used: r[4]}
	if req.Kind == KindSemaphore {
		g.Permits = req.Permits
	}
	if g.Watchdog {
		s.reschedule(ctx, g)
	}
	return g, nil
}

// notAcked reports whether err says the replicas did not acknowledge a write in time.
func notAcked(err error) bool {
	var na *notAckedError
	return errors.As(err, &na)
}

// undoUnacked gives back the one hold of mode that a grant the replicas did not acknowledge gave
// l, so that a grant the client is told failed holds nothing, even on the old master. Only a reply
// that says a hold was taken is undone: a refusal took nothing, and undoing it would take back a
// hold the lease had before.
func (s *Service) undoUnacked(ctx context.Context, l Lease, mode Mode) {
	if _, rerr := s.releaseLease(context.WithoutCancel(ctx), l, "", mode); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
		s.log.Warn("giving back a grant the replicas did not acknowledge failed; it runs out with its TTL", l.Kind.String(), l.Lock, "err", rerr)
	}
}

// undo gives back one hold of g, on a context of its own: the caller's may have ended.
func (s *Service) undo(ctx context.Context, g Grant) {
	_, _ = s.releaseLease(context.WithoutCancel(ctx), g.Lease, "", g.Mode)
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
