package api

// ForceRelease is the body of DELETE /locks/{name}?force=true.
type ForceRelease struct {
	Lock         string        `json:"lock"`
	Released     bool          `json:"released"` // always true: nothing holds the lock any more
	Forced       bool          `json:"forced"`   // always true
	HoldsRemoved int64         `json:"holds_removed"`
	Removed      []RemovedHold `json:"removed"`
}

// RemovedHold is one hold a force release took away: whose it was, its fence, its mode (a
// semaphore's permit and an election's lead: "shared" and "exclusive"), and the multi-lock it
// belonged to, for a member.
type RemovedHold struct {
	Owner     string `json:"owner"`
	Fence     int64  `json:"fence"`
	Mode      string `json:"mode"`
	Multilock string `json:"multilock,omitempty"`
}

// SemaphoreForceRelease is the body of DELETE /semaphores/{name}?force=true.
type SemaphoreForceRelease struct {
	Semaphore    string        `json:"semaphore"`
	Released     bool          `json:"released"`
	Forced       bool          `json:"forced"`
	HoldsRemoved int64         `json:"holds_removed"`
	Removed      []RemovedHold `json:"removed"`
}

// Events of GET /locks/{name}/events and /semaphores/{name}/events (Server-Sent Events): each is
// the JSON of one event's data line. Every event names the lock (for a semaphore, the semaphore)
// and when it happened.

// LockStateEvent is the "state" event of a lock: the body of GET /locks/{name}, and when.
type LockStateEvent struct {
	LockState
	At Timestamp `json:"at"`
}

// SemaphoreStateEvent is the "state" event of a semaphore: the body of GET /semaphores/{name},
// plus lock (its name) and when.
type SemaphoreStateEvent struct {
	SemaphoreState
	Lock string    `json:"lock"`
	At   Timestamp `json:"at"`
}

// HoldEvent is a "granted", "handed-off", "released" or "expired" event. Mode is a lock's only;
// Waiters is set on "granted" only.
type HoldEvent struct {
	Lock    string    `json:"lock"`
	At      Timestamp `json:"at"`
	Owner   string    `json:"owner"`
	Fence   int64     `json:"fence"`
	Mode    string    `json:"mode,omitempty"`
	Waiters *int64    `json:"waiters,omitempty"`
}

// WaitersEvent is a "waiters" event: the number of live waiters changed.
type WaitersEvent struct {
	Lock    string    `json:"lock"`
	At      Timestamp `json:"at"`
	Waiters int64     `json:"waiters"`
}

// ForcedEvent is a "forced" event: a force release removed these holds.
type ForcedEvent struct {
	Lock         string       `json:"lock"`
	At           Timestamp    `json:"at"`
	Owners       []string     `json:"owners"` // of the holds removed, each once, in their order
	HoldsRemoved int64        `json:"holds_removed"`
	Holds        []ForcedHold `json:"holds"`
}

// ForcedHold is one hold a force release removed.
type ForcedHold struct {
	Owner string `json:"owner"`
	Fence int64  `json:"fence"`
	Mode  string `json:"mode,omitempty"`
}

// LostEvent is a "lost" event: the lease of the stream's Lease-Token ended by anything but its own
// release. Reason is "expired", "forced" or "gone" (the stream missed events, then found the lease
// gone). It is the stream's last event.
type LostEvent struct {
	Lock   string    `json:"lock"`
	At     Timestamp `json:"at"`
	Fence  int64     `json:"fence"`
	Reason string    `json:"reason"`
}

// ClosedEvent is a "closed" event: the gateway ended the stream, and says why in Reason:
// "unauthenticated" (the credential was revoked from the auth file, or it expired), "forbidden"
// (the principal lost the permission or the prefix the stream needs, or the lease token is no
// longer its) or "lifetime" (the stream reached LEASEGATE_MAX_STREAM_LIFETIME: reconnect).
// Detail is the reason in words. It is the stream's last event.
type ClosedEvent struct {
	Lock   string    `json:"lock"`
	At     Timestamp `json:"at"`
	Reason string    `json:"reason"`
	Detail string    `json:"detail"`
}
