package leasegate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Errors a call can be matched against with errors.Is.
var (
	ErrHeld      = errors.New("lock is held by another lease")  // 409 lock-held
	ErrLeaseGone = errors.New("lease no longer holds the lock") // 410 lease-gone
	// ErrUpgradeRefused: a shared holder asked for the lock exclusively (409 upgrade-refused).
	// Upgrades deadlock; release the shared hold, then lock exclusively.
	ErrUpgradeRefused = errors.New("a shared hold cannot be upgraded to exclusive")
	// ErrSemaphoreFull: no permit of the semaphore is free, or others wait for one (409
	// semaphore-full); the semaphore's ErrHeld.
	ErrSemaphoreFull = errors.New("no permit of the semaphore is free")
	// ErrPermitsMismatch: the semaphore, which someone holds or waits on, has another size (409
	// permits-mismatch); ProblemError.SemaphorePermits tells its size.
	ErrPermitsMismatch = errors.New("the semaphore has another number of permits")
	// ErrLeaseLapsing: the lease was not renewed and is about to lapse (Lease.Err, Lease.Context).
	ErrLeaseLapsing = errors.New("lease about to lapse: no renewal succeeded in time")
	// ErrReleased: the lease was released (Lease.Err, Lease.Context).
	ErrReleased = errors.New("lease released")
	// ErrLeaseExpired: the lease ran out on the gateway, as its events stream told (Lease.Err: a
	// *LostError, which matches ErrLeaseGone too).
	ErrLeaseExpired = errors.New("lease expired")
	// ErrLeaseForced: an operator force-released the lock (DELETE /locks/{name}?force=true), as
	// the lease's events stream told (Lease.Err: a *LostError, which matches ErrLeaseGone too).
	ErrLeaseForced = errors.New("lease force-released")
	// ErrLed: another candidate leads the election, or others wait in line before this one (409
	// election-led); the election's ErrHeld.
	ErrLed = errors.New("another candidate leads the election")
	// ErrUnauthenticated: the gateway authenticates (an auth file) and the request carried no API
	// key, or one it does not know (401 unauthenticated): see WithAPIKey.
	ErrUnauthenticated = errors.New("not authenticated: no API key, or one the gateway does not know")
	// ErrForbidden: the API key's principal may not make the call: it lacks the permission
	// (Problem.Permission) or no prefix of its covers the name (Problem.Name), or the Lease-Token
	// is another principal's (403 forbidden).
	ErrForbidden = errors.New("forbidden to this API key's principal")
)

// ProblemError is a problem+json answer from the gateway.
type ProblemError struct {
	Problem
}

// Error shows the status, title, detail and every rejected input whose reason the detail does
// not already say (a bad lock name's does).
func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s: %s", e.Status, e.Title, e.Detail)
	if e.InvalidParams != nil {
		for _, p := range *e.InvalidParams {
			if p.Reason != e.Detail {
				fmt.Fprintf(&b, "; %s: %s", p.Name, p.Reason)
			}
		}
	}
	return b.String()
}

// Is matches ErrHeld, ErrLeaseGone, ErrUpgradeRefused, ErrSemaphoreFull, ErrPermitsMismatch, ErrLed,
// ErrUnauthenticated and ErrForbidden by problem type.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrHeld:
		return e.Type == "urn:leasegate:problem:lock-held"
	case ErrLeaseGone:
		return e.Type == "urn:leasegate:problem:lease-gone"
	case ErrUpgradeRefused:
		return e.Type == "urn:leasegate:problem:upgrade-refused"
	case ErrSemaphoreFull:
		return e.Type == "urn:leasegate:problem:semaphore-full"
	case ErrPermitsMismatch:
		return e.Type == "urn:leasegate:problem:permits-mismatch"
	case ErrLed:
		return e.Type == "urn:leasegate:problem:election-led"
	case ErrUnauthenticated:
		return e.Type == "urn:leasegate:problem:unauthenticated"
	case ErrForbidden:
		return e.Type == "urn:leasegate:problem:forbidden"
	}
	return false
}

// RetryAfter is how long until the holder's lease runs out, for lock-held problems (for a
// multi-lock, the longest among its held members; for semaphore-full, until the first permit's
// lease runs out).
func (e *ProblemError) RetryAfter() time.Duration {
	if e.RetryAfterMs == nil {
		return 0
	}
	return time.Duration(*e.RetryAfterMs) * time.Millisecond
}

// SemaphorePermits is the semaphore's size, for permits-mismatch problems; 0 otherwise.
func (e *ProblemError) SemaphorePermits() int64 {
	if e.Permits == nil {
		return 0
	}
	return *e.Permits
}

// Members are the multi-lock members a problem from /multilocks names: for lock-held, those that
// were held (or had others waiting); for lease-gone, those no longer held (the gateway freed the
// others). Nil for other problems. (Problem.Locks holds the same list.)
func (e *ProblemError) Members() []string {
	if e.Locks == nil {
		return nil
	}
	return *e.Locks
}

// forcedDetail ends the detail of a 410 lease-gone answer to a lease that a force release removed,
// from gateways older than the problem's forced_at field.
const forcedDetail = ": an operator force-released it at "

// ForceReleasedAt is when an operator's force release removed the lease, for a lease-gone problem whose
// gateway knows (it remembers for LEASEGATE_FENCE_TTL); zero otherwise.
func (e *ProblemError) ForceReleasedAt() time.Time {
	if e.Problem.ForcedAt == nil {
		return time.Time{}
	}
	return *e.Problem.ForcedAt
}

// forcedAway reports whether err is the gateway's 410 saying that a force release removed the
// lease: its forced_at, or the detail of a gateway from before that field.
func forcedAway(err error) bool {
	var p *ProblemError
	return errors.As(err, &p) && errors.Is(p, ErrLeaseGone) && (!p.ForceReleasedAt().IsZero() || strings.Contains(p.Detail, forcedDetail))
}

// problem turns a non-2xx answer into a *ProblemError.
func problem(resp *http.Response, body []byte) error {
	p := &ProblemError{}
	if err := json.Unmarshal(body, &p.Problem); err != nil || p.Type == "" {
		return fmt.Errorf("unexpected answer %s: %.200s", resp.Status, body)
	}
	return p
}
