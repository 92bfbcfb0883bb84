package api

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Elections: /elections/{name}, a name space of their own. A campaign is an exclusive acquire of
// the election whose holder leads it and carries a value.

// MaxValueLen bounds a leader's value, in bytes.
const MaxValueLen = 4096

// ValidateValue reports why value is not a valid leader's value: valid UTF-8 (without U+FFFD) of
// at most MaxValueLen bytes; it may be empty.
func ValidateValue(value string) error {
	if !utf8.ValidString(value) || strings.ContainsRune(value, utf8.RuneError) {
		return fmt.Errorf("value must be valid UTF-8 (and not contain U+FFFD)")
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("value must be at most %d bytes long, got %d", MaxValueLen, len(value))
	}
	return nil
}

// CampaignRequest is the body of POST /elections/{name}: the fields of a lock's acquire (no
// mode: a leader holds its election exclusively), and the value to announce once elected.
type CampaignRequest struct {
	Owner       string  `json:"owner"`
	Value       *string `json:"value"`
	TTLms       *int64  `json:"ttl_ms,omitempty"`
	Waitms      *int64  `json:"wait_ms,omitempty"`
	Watchdog    *bool   `json:"watchdog,omitempty"`
	MaxHoldms   *int64  `json:"max_hold_ms,omitempty"`
	QueueTicket string  `json:"queue_ticket,omitempty"`
}

// Campaign is a validated CampaignRequest with defaults applied.
type Campaign struct {
	Acquire
	Value string
}

// Validate checks r against l and applies defaults. It returns every invalid field, not just the first.
func (r CampaignRequest) Validate(l Limits) (Campaign, []InvalidParam) {
	a, bad := AcquireRequest{Owner: r.Owner, TTLms: r.TTLms, Waitms: r.Waitms, Watchdog: r.Watchdog,
		MaxHoldms: r.MaxHoldms, QueueTicket: r.QueueTicket}.validateCommon(l)
	c := Campaign{Acquire: a}
	c.Value, bad = validValue(r.Value, bad)
	return c, bad
}

// ProclaimRequest is the body of PUT /elections/{name}: the leader's new value.
type ProclaimRequest struct {
	Value *string `json:"value"`
}

// Validate checks r; the value is the validated one.
func (r ProclaimRequest) Validate(Limits) (string, []InvalidParam) {
	return validValue(r.Value, nil)
}

func validValue(v *string, bad []InvalidParam) (string, []InvalidParam) {
	switch {
	case v == nil:
		return "", append(bad, InvalidParam{Name: "value", Reason: fmt.Sprintf("value is required: what the leader announces (e.g. its address), a string of at most %d bytes", MaxValueLen)})
	case ValidateValue(*v) != nil:
		return "", append(bad, InvalidParam{Name: "value", Reason: ValidateValue(*v).Error()})
	}
	return *v, bad
}

// Leadership is the body of a successful campaign (201): the leader's lease and the value
// announced. EventID is the id of the election's event that announced the value
// (`elected`, or the latest `proclaimed`).
type Leadership struct {
	Election  string    `json:"election"`
	Owner     string    `json:"owner"`
	Value     string    `json:"value"`
	Token     string    `json:"token"`
	Fence     int64     `json:"fence"`
	TTLms     int64     `json:"ttl_ms"`
	ExpiresAt Timestamp `json:"expires_at"`
	Watchdog  bool      `json:"watchdog"`
	Since     Timestamp `json:"since"`
	EventID   string    `json:"event_id"`
}

// Proclamation is the body of a successful PUT /elections/{name}: the leader as announced now.
type Proclamation struct {
	Election string `json:"election"`
	ElectionLeader
}

// ElectionRenewal is the body of a successful POST /elections/{name}/renew.
type ElectionRenewal struct {
	Election  string    `json:"election"`
	Owner     string    `json:"owner"`
	Token     string    `json:"token"`
	Fence     int64     `json:"fence"`
	TTLms     int64     `json:"ttl_ms"`
	ExpiresAt Timestamp `json:"expires_at"`
	Watchdog  bool      `json:"watchdog"`
}

// Resignation is the body of a successful DELETE /elections/{name}. EventID is the id of the
// `resigned` event, absent when none was written (a retry with the same Idempotency-Key).
type Resignation struct {
	Election string `json:"election"`
	Resigned bool   `json:"resigned"` // always true
	Fence    int64  `json:"fence"`
	EventID  string `json:"event_id,omitempty"`
}

// ElectionLeader is an election's leader in a state body.
type ElectionLeader struct {
	Owner string    `json:"owner"`
	Value string    `json:"value"`
	Fence int64     `json:"fence"`
	Since Timestamp `json:"since"`
	TTLms int64     `json:"ttl_ms"` // what its lease had left when read
	// EventID is the id of the event that announced its value.
	EventID string `json:"event_id"`
}

// ElectionState is the body of GET /elections/{name}. Leader is absent while nobody leads;
// Candidates counts those waiting in line; LastEventID is the id of the election's last event
// ("0-0": none yet), after which GET /elections/{name}/events with Last-Event-ID goes on.
// Waiting, in GET /elections listings only, names the first 20 candidates of a led election, in
// line order, as a lock listing names its waiters.
type ElectionState struct {
	Election    string          `json:"election"`
	Led         bool            `json:"led"`
	Leader      *ElectionLeader `json:"leader,omitempty"`
	Candidates  int64           `json:"candidates"`
	LastEventID string          `json:"last_event_id"`
	Waiting     []ListedWaiter  `json:"waiting,omitempty"`
}

// ElectionForceRelease is the body of DELETE /elections/{name}?force=true.
type ElectionForceRelease struct {
	Election     string        `json:"election"`
	Released     bool          `json:"released"`
	Forced       bool          `json:"forced"`
	HoldsRemoved int64         `json:"holds_removed"`
	Removed      []RemovedHold `json:"removed"`
}

// Events of GET /elections/{name}/events (Server-Sent Events): each is the JSON of one event's
// data line, naming the election and when it happened.

// ElectionStateEvent is the "state" event: the body of GET /elections/{name}, when, and whether it
// stands for events that are no longer in the log (Gap).
type ElectionStateEvent struct {
	ElectionState
	At  Timestamp `json:"at"`
	Gap bool      `json:"gap,omitempty"`
}

// LeaderEvent is an "elected", "proclaimed", "resigned" or "vacant" event: the leader it is about.
// Value is set on elected and proclaimed only.
type LeaderEvent struct {
	Election string    `json:"election"`
	At       Timestamp `json:"at"`
	Owner    string    `json:"owner"`
	Fence    int64     `json:"fence"`
	Value    *string   `json:"value,omitempty"`
}

// ElectionClosedEvent is the "closed" event of an election's stream (see ClosedEvent).
type ElectionClosedEvent struct {
	Election string    `json:"election"`
	At       Timestamp `json:"at"`
	Reason   string    `json:"reason"`
	Detail   string    `json:"detail"`
}
