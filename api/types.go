// Package api holds the wire types of leasegate's HTTP contract. They mirror openapi.yaml, which is
// the single source of the contract; tests validate every response against that file.
package api

import "time"

// AcquireRequest is the body of POST /locks/{name}. Pointer fields distinguish "absent" (use the
// default) from an explicit value.
type AcquireRequest struct {
	Owner    string `json:"owner"`
	TTLms    *int64 `json:"ttl_ms,omitempty"`
	Waitms   *int64 `json:"wait_ms,omitempty"`
	Watchdog *bool  `json:"watchdog,omitempty"`
	// MaxHoldms bounds a watchdog lease: it is not renewed past this long after its grant.
	MaxHoldms *int64 `json:"max_hold_ms,omitempty"`
	// QueueTicket, from the 409 that ended an earlier wait, resumes that wait's place in the queue.
	QueueTicket string `json:"queue_ticket,omitempty"`
}

// RenewRequest is the optional body of POST /locks/{name}/renew.
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
}

// Release is the body of a successful DELETE /locks/{name}.
type Release struct {
	Lock     string `json:"lock"`
	Released bool   `json:"released"`
	Holds    int64  `json:"holds"`
}

// LockState is the body of GET /locks/{name}. Fields after Held are present only while it is held;
// Yours only when the request carried a Lease-Token.
type LockState struct {
	Lock     string `json:"lock"`
	Held     bool   `json:"held"`
	Owner    string `json:"owner,omitempty"`
	Fence    int64  `json:"fence,omitempty"`
	Holds    int64  `json:"holds,omitempty"`
	TTLms    *int64 `json:"ttl_ms,omitempty"`
	Waiters  int64  `json:"waiters"`
	Watchdog *bool  `json:"watchdog,omitempty"`
	// MaxHoldms is how much longer the watchdog renews the lease (watchdog leases only).
	MaxHoldms *int64 `json:"max_hold_ms,omitempty"`
	Yours     *bool  `json:"yours,omitempty"`
}

// Health is the body of /healthz and /readyz.
type Health struct {
	Status string `json:"status"`
}

// Timestamp is a UTC time that marshals as RFC 3339 with millisecond precision.
type Timestamp time.Time

// TimestampLayout is the wire layout of every timestamp.
const TimestampLayout = "2006-01-02T15:04:05.000Z07:00"

// MarshalJSON implements json.Marshaler.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(TimestampLayout) + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	v, err := time.Parse(`"`+time.RFC3339Nano+`"`, string(b))
	*t = Timestamp(v)
	return err
}
