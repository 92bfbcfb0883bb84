package lockcore

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors returned by Service methods, wrapped with detail. Match them with errors.Is.
var (
	// ErrHeld: the lock is held by another lease. The error is a *HeldError.
	ErrHeld = errors.New("lock is held by another lease")
	// ErrLeaseLost: the lease no longer holds the lock (expired, or fully released).
	ErrLeaseLost = errors.New("lease no longer holds the lock")
	// ErrInvalidToken: a lease token is malformed, forged, or minted for another lock.
	ErrInvalidToken = errors.New("invalid lease token")
	// ErrInvalid: a request is inconsistent in a way only lockcore can tell (e.g. owner vs token).
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable: Redis could not be reached or did not answer in time; for writes the outcome
	// is unknown, and the lease's TTL bounds the cost of a lost reply.
	ErrUnavailable = errors.New("redis unavailable")
)

// errShuttingDown ends waits when the Service closes; callers should retry on another replica.
var errShuttingDown = fmt.Errorf("%w: gateway shutting down", ErrUnavailable)

// HeldError reports a lock held by someone else and how long until its current lease expires.
type HeldError struct {
	Lock       string
	RetryAfter time.Duration // the holder's remaining TTL
	Waited     time.Duration // how long the caller waited before giving up; 0 for try-once
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s: lock %q, retry after %v", ErrHeld, e.Lock, e.RetryAfter)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }
