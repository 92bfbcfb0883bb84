// Package api holds the wire types of leasegate's HTTP contract. They mirror openapi.yaml, which is
// the single source of the contract; tests validate every response against that file.
package api

import "time"

// AcquireRequest is the body of POST /locks/{name}. Pointer fields distinguish "absent" (use the
// default) from an explicit value.
type AcquireRequest struct {
	Owner string `json:"owner"`
	// Mode is "exclusive" (the default) or "shared": shared holds coexist, an exclusive one
	// excludes every other hold.
	Mode     string `json:"mode,omitempty"`
	TTLms    *int64 `json:"ttl_ms,omitempty"`
	Waitms   *int64 `json:"wait_ms,omitempty"`
	Watchdog *bool  `json:"watchdog,omitempty"`
	// MaxHoldms bounds a watchdog lease: it is not renewed past this long after its grant.
	MaxHoldms *int64 `json:"max_hold_ms,omitempty"`
	// QueueTicket, from the 409 that ended an earlier wait, resumes that wait's place in the queue.
	QueueTicket string `json:"queue_ticket,omitempty"`
}

// SemaphoreAcquireRequest is the body of POST /semaphores/{name}: one permit of a semaphore of
// Permits permits.
type SemaphoreAcquireRequest struct {
	Owner       string `json:"owner"`
	Permits     *int64 `json:"permits"`
	TTLms       *int64 `json:"ttl_ms,omitempty"`
	Waitms      *int64 `json:"wait_ms,omitempty"`
	Watchdog    *bool  `json:"watchdog,omitempty"`
	MaxHoldms   *int64 `json:"max_hold_ms,omitempty"`
	QueueTicket string `json:"queue_ticket,omitempty"`
}

// RenewRequest is the optional body of POST /locks/{name}/renew and /semaphores/{name}/renew.
type RenewRequest struct {
	TTLms *int64 `json:"ttl_ms,omitempty"`
}

// Grant is the body of a successful acquire (201 new grant, 200 re-entry) and of a renew.
type Grant struct {
	Lock      string    `json:"lock"`
	Owner     string    `json:"owner"`
	Token     string    `json:"token"`
	Fence     int64     `json:"fence"`
	TTLms     int64     `json:"ttl_ms"`
	ExpiresAt Timestamp `json:"expires_at"`
	Holds     int64     `json:"holds"`
	Watchdog  bool      `json:"watchdog"`
	Mode      string    `json:"mode"` // the hold granted: "exclusive" or "shared"
}

// SemaphoreGrant is the body of a successful semaphore acquire (201 new permit, 200 re-entry) and
// of its renew.
type SemaphoreGrant struct {
	Semaphore string    `json:"semaphore"`
	Owner     string    `json:"owner"`
	Token     string    `json:"token"`
	Fence     int64     `json:"fence"`
	TTLms     int64     `json:"ttl_ms"`
	ExpiresAt Timestamp `json:"expires_at"`
	Holds     int64     `json:"holds"`
	Watchdog  bool      `json:"watchdog"`
	Permits   int64     `json:"permits"` // the semaphore's size
	Used      int64     `json:"used"`    // permits in use, this one included
}

// Release is the body of a successful DELETE /locks/{name}.
type Release struct {
	Lock     string `json:"lock"`
	Released bool   `json:"released"`
	Holds    int64  `json:"holds"`
	Mode     string `json:"mode"` // the hold given back (or decremented)
}

// SemaphoreRelease is the body of a successful DELETE /semaphores/{name}.
type SemaphoreRelease struct {
	Semaphore string `json:"semaphore"`
	Released  bool   `json:"released"`
	Holds     int64  `json:"holds"`
}

// Holder is one lease's hold in a state body.
type Holder struct {
	Owner    string `json:"owner"`
	Fence    int64  `json:"fence"`
	Holds    int64  `json:"holds"`
	TTLms    int64  `json:"ttl_ms"`
	Watchdog bool   `json:"watchdog"`
	// MaxHoldLeftms is how much longer the watchdog renews the lease (watchdog leases only).
	MaxHoldLeftms *int64 `json:"max_hold_left_ms,omitempty"`
	// MaxHoldms is MaxHoldLeftms again, under the name a request gives the limit itself: the wire
	// name answers used before max_hold_left_ms, deprecated in openapi.yaml, kept for clients that
	// read it.
	MaxHoldms *int64 `json:"max_hold_ms,omitempty"`
	// Multilock is the id of the multi-lock the hold belongs to (a multi-lock's member only).
	Multilock string `json:"multilock,omitempty"`
}

// LockState is the body of GET /locks/{name}. Mode is present while it is held; the exclusive
// holder's fields (Owner to Multilock) only while it is held exclusively; Holders and HolderCount
// only while shared holds exist; Yours only when the request carried a Lease-Token.
type LockState struct {
	Lock     string `json:"lock"`
	Held     bool   `json:"held"`
	Mode     string `json:"mode,omitempty"`
	Owner    string `json:"owner,omitempty"`
	Fence    int64  `json:"fence,omitempty"`
	Holds    int64  `json:"holds,omitempty"`
	TTLms    *int64 `json:"ttl_ms,omitempty"`
	Waiters  int64  `json:"waiters"`
	Watchdog *bool  `json:"watchdog,omitempty"`
	// MaxHoldLeftms is how much longer the watchdog renews the lease (watchdog leases only).
	MaxHoldLeftms *int64 `json:"max_hold_left_ms,omitempty"`
	// MaxHoldms is MaxHoldLeftms again, under the name a request gives the limit itself: the wire
	// name answers used before max_hold_left_ms, deprecated in openapi.yaml, kept for clients that
	// read it.
	MaxHoldms *int64 `json:"max_hold_ms,omitempty"`
	// Multilock is the id of the multi-lock the exclusive holder is (a multi-lock's member only).
	Multilock string `json:"multilock,omitempty"`
	// Holders are the shared holders (the first 100, soonest to expire first; HolderCount counts
	// them all).
	Holders     []Holder `json:"holders,omitempty"`
	HolderCount *int64   `json:"holder_count,omitempty"`
	Yours       *bool    `json:"yours,omitempty"`
	// RedissonHolders are the holders that are Redisson's own clients (a name shared with
	// Redisson, docs/redisson.md), the first 100.
	RedissonHolders []RedissonHolder `json:"redisson_holders,omitempty"`
}

// RedissonHolder is a Redisson client's hold of a name shared with Redisson.
type RedissonHolder struct {
	// Field is its field in Redisson's hash: `<client id>:<thread id>`, `:write` after a writer's.
	Field string `json:"field"`
	Mode  string `json:"mode"`
	Holds int64  `json:"holds"`
	TTLms int64  `json:"ttl_ms"`
}

// SemaphoreState is the body of GET /semaphores/{name}.
type SemaphoreState struct {
	Name        string   `json:"name"`
	Permits     int64    `json:"permits"` // its size; 0 while nobody holds or waits
	Used        int64    `json:"used"`
	Holders     []Holder `json:"holders"`
	HolderCount int64    `json:"holder_count"`
	Waiters     int64    `json:"waiters"`
	Yours       *bool    `json:"yours,omitempty"`
}

// Health is the body of /healthz and /readyz.
type Health struct {
	Status string `json:"status"`
}

// Timestamp is a UTC time that marshals as RFC 3339 with millisecond precision.
type Timestamp time.Time

// TimestampLayout is the wire layout of every timestamp.
const TimestampLayout = "2006-01-02T15:04:05.000Z07:00"

// MarshalText implements encoding.TextMarshaler: encoding/json writes it as a JSON string. (A
// json.Marshaler's output is checked and compacted by encoding/json, at a cost to every grant.)
func (t Timestamp) MarshalText() ([]byte, error) {
	return time.Time(t).UTC().AppendFormat(make([]byte, 0, len(TimestampLayout)), TimestampLayout), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	v, err := time.Parse(`"`+time.RFC3339Nano+`"`, string(b))
	*t = Timestamp(v)
	return err
}
