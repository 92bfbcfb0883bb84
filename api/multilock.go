package api

import "fmt"

// A multi-lock takes 2-64 locks at once.
const (
	MinMultiLocks = 2
	MaxMultiLocks = 64
)

// MultiLockRequest is the body of POST /multilocks.
type MultiLockRequest struct {
	Owner     string   `json:"owner"`
	Locks     []string `json:"locks"`
	Mode      string   `json:"mode,omitempty"`
	TTLms     *int64   `json:"ttl_ms,omitempty"`
	Waitms    *int64   `json:"wait_ms,omitempty"`
	Watchdog  *bool    `json:"watchdog,omitempty"`
	MaxHoldms *int64   `json:"max_hold_ms,omitempty"`
	// QueueTicket, from the 409 that ended an earlier wait for the same locks, resumes that wait:
	// the same group id and its place in the line it waited in.
	QueueTicket string `json:"queue_ticket,omitempty"`
}

// MultiLock is a validated MultiLockRequest with defaults applied.
type MultiLock struct {
	Acquire
	Locks []string // as sent: distinct, valid names
}

// Validate checks r against l and applies defaults. It returns every invalid field, not just the first.
func (r MultiLockRequest) Validate(l Limits) (MultiLock, []InvalidParam) {
	a, bad := AcquireRequest{Owner: r.Owner, Mode: r.Mode, TTLms: r.TTLms, Waitms: r.Waitms, Watchdog: r.Watchdog,
		MaxHoldms: r.MaxHoldms, QueueTicket: r.QueueTicket}.Validate(l)
	if len(r.Locks) < MinMultiLocks || len(r.Locks) > MaxMultiLocks {
		bad = append(bad, InvalidParam{Name: "locks", Reason: fmt.Sprintf("must name %d to %d locks, got %d", MinMultiLocks, MaxMultiLocks, len(r.Locks))})
	}
	seen := make(map[string]int, len(r.Locks))
	for i, name := range r.Locks {
		field := fmt.Sprintf("locks[%d]", i)
		if err := ValidateLockName(name); err != nil {
			bad = append(bad, InvalidParam{Name: field, Reason: err.Error()})
		} else if j, dup := seen[name]; dup {
			bad = append(bad, InvalidParam{Name: field, Reason: fmt.Sprintf("%q is named twice (also locks[%d]); a multi-lock's locks must be distinct", name, j)})
		} else {
			seen[name] = i
		}
		if len(bad) > MaxMultiLocks { // enough to fix a body with
			break
		}
	}
	return MultiLock{Acquire: a, Locks: r.Locks}, bad
}

// MultiLockMember is one member of a multi-lock grant.
type MultiLockMember struct {
	Lock  string `json:"lock"`
	Fence int64  `json:"fence"`
}

// MultiLockGrant is the body of a successful POST /multilocks (201) and of its renew.
type MultiLockGrant struct {
	ID        string            `json:"id"`
	Owner     string            `json:"owner"`
	Token     string            `json:"token"`
	Mode      string            `json:"mode"`
	TTLms     int64             `json:"ttl_ms"`
	ExpiresAt Timestamp         `json:"expires_at"`
	Watchdog  bool              `json:"watchdog"`
	Locks     []MultiLockMember `json:"locks"` // in name order
}

// MultiLockRelease is the body of a successful DELETE /multilocks[/{id}].
type MultiLockRelease struct {
	ID       string   `json:"id"`
	Released bool     `json:"released"`
	Locks    []string `json:"locks"`
}
