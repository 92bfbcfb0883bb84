package lockcore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Sentinel errors returned by Service methods, wrapped with detail. Match them with errors.Is.
var (
	// ErrHeld: the lock is held by another lease. The error is a *HeldError.
	ErrHeld = errors.New("lock is held by another lease")
	// ErrLeaseLost: the lease no longer holds the lock (expired, or fully released).
	ErrLeaseLost = errors.New("lease no longer holds the lock")
	// ErrIdempotencyKeyReused: the request's Idempotency-Key was first sent with another request
	// (another operation, lock, owner, mode, TTL or lease): it is not a retry, and nothing was done.
	ErrIdempotencyKeyReused = errors.New("the Idempotency-Key was first sent with another request")
	// ErrInvalidToken: a lease token is malformed, forged, or minted for another lock.
	ErrInvalidToken = errors.New("invalid lease token")
	// ErrInvalidTicket: a queue ticket is malformed, forged, or minted for another lock or owner.
	ErrInvalidTicket = errors.New("invalid queue ticket")
	// ErrInvalid: a request is inconsistent in a way only lockcore can tell (e.g. owner vs token).
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable: Redis could not be reached or did not answer in time; for writes the outcome
	// is unknown, and the lease's TTL bounds the cost of a lost reply.
	ErrUnavailable = errors.New("redis unavailable")
	// ErrTooManyWaiters: this replica already holds Options.MaxWaiters waiting acquires; retry
	// later or on another replica.
	ErrTooManyWaiters = errors.New("too many waiting requests on this gateway")
	// ErrUpgradeRefused: a lease that holds a lock shared asked for it exclusively. Upgrades
	// deadlock (two readers each waiting for the other to leave), so they are refused.
	ErrUpgradeRefused = errors.New("a shared hold cannot be upgraded to exclusive")
	// ErrPermitsMismatch: a request named another size than the semaphore's. The error is a
	// *PermitsMismatchError.
	ErrPermitsMismatch = errors.New("the semaphore has another number of permits")
	// ErrNotSupported: the operation cannot be offered on this deployment (RedLock: see
	// redlock_quorum.go).
	ErrNotSupported = errors.New("not supported on this deployment")
	// ErrQuotaExceeded: a new lease would take its principal past Options.MaxHeld holds at once.
	// The error is a *QuotaExceededError.
	ErrQuotaExceeded = errors.New("quota of holds exceeded")
)

// PermitsMismatchError reports a semaphore whose size, set by whoever acquired it first while
// nobody held or waited, differs from the request's.
type PermitsMismatchError struct {
	Semaphore string
	Permits   int64 // the semaphore's size
}

func (e *PermitsMismatchError) Error() string {
	return fmt.Sprintf("%s: semaphore %q has %d permits", ErrPermitsMismatch, e.Semaphore, e.Permits)
}

// Is makes errors.Is(err, ErrPermitsMismatch) true.
func (e *PermitsMismatchError) Is(target error) bool { return target == ErrPermitsMismatch }

// ErrShuttingDown: the Service is closing; it ends waits and refuses new ones. Retry on another
// replica. It matches ErrUnavailable too; a wait it ended returns a *ShutdownError.
var ErrShuttingDown = fmt.Errorf("%w: gateway shutting down", ErrUnavailable)

// errShuttingDown is ErrShuttingDown for a wait that never joined a queue.
var errShuttingDown = &ShutdownError{}

// errTicketIgnored: a queue ticket did not verify (or names no principal, see errUnboundTicket);
// the waiter queues as a newcomer.
var errTicketIgnored = errors.New("queue ticket ignored")

// errUnboundTicket: a queue ticket handed to no principal, presented by an authenticated caller
// (see parseTicket): ignored, the caller queues as a newcomer.
var errUnboundTicket = fmt.Errorf("%w: it names no principal", errTicketIgnored)

// ShutdownError ends a wait when its Service closes. It matches ErrShuttingDown and ErrUnavailable.
type ShutdownError struct {
	// QueueTicket lets the waiter resume its place on another replica (see
	// AcquireRequest.QueueTicket); empty when the wait had no place in the queue to keep.
	QueueTicket string
}

func (e *ShutdownError) Error() string { return ErrShuttingDown.Error() }

// Unwrap makes errors.Is(err, ErrShuttingDown) and errors.Is(err, ErrUnavailable) true.
func (e *ShutdownError) Unwrap() error { return ErrShuttingDown }

// HeldError reports a lock held by someone else and how long until its current lease expires.
type HeldError struct {
	Lock       string // the lock's (or semaphore's) name
	Kind       Kind
	RetryAfter time.Duration // the holder's remaining TTL
	Waited     time.Duration // how long the caller waited before giving up; 0 for try-once
	// QueueTicket, after a wait, lets the caller's next waiting acquire resume at this one's place
	// in the queue (see AcquireRequest.QueueTicket); empty when the wait never reached the queue.
	QueueTicket string
	// Locks, for a multi-lock, are the members that were held (or waited for); Lock is the first.
	Locks []string
}

func (e *HeldError) Error() string {
	if len(e.Locks) > 1 {
		return fmt.Sprintf("%s: locks %q, retry after %v", ErrHeld, e.Locks, e.RetryAfter)
	}
	switch e.Kind {
	case KindSemaphore:
		return fmt.Sprintf("no permit free: semaphore %q, retry after %v", e.Lock, e.RetryAfter)
	case KindElection:
		return fmt.Sprintf("another candidate leads election %q, retry after %v", e.Lock, e.RetryAfter)
	}
	return fmt.Sprintf("%s: lock %q, retry after %v", ErrHeld, e.Lock, e.RetryAfter)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// LeaseLostError reports a lease that no longer holds its lock or semaphore, and how it ended
// when Redis remembers: a force release leaves a mark for as long as the fence key lives (a day
// by default); an expiry and a release leave none, so they cannot be told apart. It matches
// ErrLeaseLost.
type LeaseLostError struct {
	Ref   Ref
	Lease string // the lease's ID
	Mode  Mode   // the way a release asked to give back; "" for any
	// Forced: a force release removed the lease's holds, at ForcedAt (Redis time).
	Forced   bool
	ForcedAt time.Time
	// Unknown: the mark could not be read (Redis did not answer the look-up).
	Unknown bool
}

func (e *LeaseLostError) Error() string {
	head := fmt.Sprintf("%s: %s %q, lease %s", ErrLeaseLost, e.Ref.Kind, e.Ref.Name, e.Lease)
	switch {
	case e.Forced:
		return head + ": an operator force-released it at " + e.ForcedAt.UTC().Format("2006-01-02T15:04:05.000Z")
	case e.Mode != "" && e.Unknown:
		return fmt.Sprintf("%s: it has no %s hold", head, e.Mode)
	case e.Mode != "":
		return fmt.Sprintf("%s: it has no %s hold (it expired or was released, or the lease never held the lock that way); it was not force-released", head, e.Mode)
	case e.Unknown:
		return head + ": it expired, was released, or was force-released"
	}
	return head + ": it expired (no renewal within its TTL) or was released with its own token; it was not force-released"
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// GroupLostError reports a multi-lock whose lease no longer holds some members (an operator
// force-released them, they ran out, or Redis lost them). The call that found out gave back the
// members still held, so the group is over. It matches ErrLeaseLost.
type GroupLostError struct {
	ID     string
	Locks  []string // the members no longer held
	Forced []string // those of Locks a force release took (the rest ran out); nil when not known
}

func (e *GroupLostError) Error() string {
	how := "they ran out without a renewal"
	switch {
	case e.Forced == nil:
		how = "they ran out or were force-released"
	case len(e.Forced) == len(e.Locks):
		how = "an operator force-released them"
	case len(e.Forced) > 0:
		how = fmt.Sprintf("an operator force-released %q, the rest ran out", e.Forced)
	}
	return fmt.Sprintf("%s: multi-lock %s no longer holds %q (%s); any other member it held was given back", ErrLeaseLost, e.ID, e.Locks, how)
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *GroupLostError) Is(target error) bool { return target == ErrLeaseLost }

// errMajorityLost: a lease the watchdog renewed no longer holds on a majority of RedLock's
// masters (they restarted or lost it); what a minority still held of it was given back.
var errMajorityLost = fmt.Errorf("%w: the lease lost its majority of masters", ErrLeaseLost)

// errNotConfirmed: fewer than a majority of RedLock's masters confirmed a hand-off to a waiter
// (the others hold the lock for someone else, or do not answer): the waiter queues again.
var errNotConfirmed = errors.New("a majority of masters did not confirm the hand-off")

// classify turns a Redis or transport error into ErrUnavailable where retrying later can help:
// among them a Cluster redirection (ASK, MOVED) still there when a call stopped following them,
// as during a slot migration that outlasts replicaAcks' redirectBudget.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		if strings.HasPrefix(rerr.Error(), reusedReply) { // claim.lua's refusal
			return errKeyReused
		}
		if transientReply(rerr.Error()) {
			return fmt.Errorf("%w: %s", ErrUnavailable, rerr.Error())
		}
		return fmt.Errorf("redis: %w", err)
	}
	// Anything else is the transport: refused or broken connections, timeouts, a closing client.
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// transientReply reports whether a Redis error reply says to try again later.
func transientReply(msg string) bool {
	for _, transient := range []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "ASK ", "MOVED "} {
		if strings.HasPrefix(msg, transient) {
			return true
		}
	}
	return false
}

// notSupported is the error of a deployment that lacks f, saying why.
func notSupported(f feature, on, why string) error {
	if why != "" {
		return fmt.Errorf("%w: %s on %s (%s)", ErrNotSupported, f, on, why)
	}
	return fmt.Errorf("%w: %s on %s", ErrNotSupported, f, on)
}
