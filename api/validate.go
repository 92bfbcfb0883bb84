package api

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits bound the values a request may carry. Zero values are not valid limits.
type Limits struct {
	DefaultTTL time.Duration
	MaxTTL     time.Duration
	MaxWait    time.Duration
	MaxHold    time.Duration // default and cap of max_hold_ms
}

// Lock names and owners, semaphore sizes.
const (
	MaxPermits     = 10000
	MaxLockNameLen = 200
	MaxOwnerLen    = 128
	MaxTicketLen   = 2048
)

// ValidateLockName reports why name is not a valid lock name: 1-200 bytes of [A-Za-z0-9._:-].
func ValidateLockName(name string) error {
	if name == "" || len(name) > MaxLockNameLen {
		return fmt.Errorf("lock name must be 1-%d bytes long, got %d", MaxLockNameLen, len(name))
	}
	if name == "." || name == ".." {
		return fmt.Errorf("lock name %q is refused: path-normalising proxies read it as a path step", name)
	}
	for i, c := range name {
		if !nameChar(c) {
			return fmt.Errorf("lock name %q may contain only the letters A-Z and a-z, digits and . _ : -; found %q (%U) at byte %d", name, c, c, i)
		}
	}
	return nil
}

// nameChar says whether c may be part of a lock name.
func nameChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
}

// ValidateOwner reports why owner is not a valid owner: 1-128 printable Unicode characters.
func ValidateOwner(owner string) error {
	// encoding/json turns invalid UTF-8 and lone surrogates into U+FFFD, so reject that too.
	if !utf8.ValidString(owner) || strings.ContainsRune(owner, utf8.RuneError) {
		return fmt.Errorf("owner must be valid UTF-8 (and not contain U+FFFD)")
	}
	n := utf8.RuneCountInString(owner)
	if n == 0 || n > MaxOwnerLen {
		return fmt.Errorf("owner must be 1-%d characters long, got %d", MaxOwnerLen, n)
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("owner must contain only printable characters, found %U", r)
		}
	}
	return nil
}

// Acquire is a validated AcquireRequest with defaults applied.
type Acquire struct {
	Shared   bool // a lock's shared hold (a semaphore's permits always are)
	Permits  int64
	Owner    string
	TTL      time.Duration
	Wait     time.Duration
	Watchdog bool
	MaxHold  time.Duration // 0 unless Watchdog
	// QueueTicket resumes an earlier wait's place (waiting requests only); lockcore verifies it.
	QueueTicket string
}

// Validate checks r against l and applies defaults. It returns every invalid field, not just the first.
func (r AcquireRequest) Validate(l Limits) (Acquire, []InvalidParam) {
	a, bad := r.validateCommon(l)
	switch r.Mode {
	case "", "exclusive":
	case "shared":
		a.Shared = true
	default:
		bad = append(bad, InvalidParam{Name: "mode", Reason: fmt.Sprintf("must be \"exclusive\" or \"shared\", got %q", r.Mode)})
	}
	return a, bad
}

// Validate checks r against l and applies defaults. It returns every invalid field, not just the first.
func (r SemaphoreAcquireRequest) Validate(l Limits) (Acquire, []InvalidParam) {
	a, bad := AcquireRequest{Owner: r.Owner, TTLms: r.TTLms, Waitms: r.Waitms, Watchdog: r.Watchdog,
		MaxHoldms: r.MaxHoldms, QueueTicket: r.QueueTicket}.validateCommon(l)
	switch {
	case r.Permits == nil:
		bad = append(bad, InvalidParam{Name: "permits", Reason: fmt.Sprintf("permits is required: the semaphore's size, 1-%d", MaxPermits)})
	case *r.Permits < 1 || *r.Permits > MaxPermits:
		bad = append(bad, InvalidParam{Name: "permits", Reason: fmt.Sprintf("must be between 1 and %d, got %d", MaxPermits, *r.Permits)})
	default:
		a.Permits = *r.Permits
	}
	return a, bad
}

// validateCommon checks the fields a lock's and a semaphore's acquire share.
func (r AcquireRequest) validateCommon(l Limits) (Acquire, []InvalidParam) {
	var bad []InvalidParam
	if r.Owner == "" {
		bad = append(bad, InvalidParam{Name: "owner", Reason: "owner is required: who holds the lock, 1-128 printable characters"})
	} else if err := ValidateOwner(r.Owner); err != nil {
		bad = append(bad, InvalidParam{Name: "owner", Reason: err.Error()})
	}
	ttl, err := durationField(r.TTLms, l.DefaultTTL, 1, l.MaxTTL)
	if err != nil {
		bad = append(bad, InvalidParam{Name: "ttl_ms", Reason: err.Error()})
	}
	wait, err := waitField(r.Waitms, l.MaxWait)
	if err != nil {
		bad = append(bad, InvalidParam{Name: "wait_ms", Reason: err.Error()})
	}
	a := Acquire{Owner: r.Owner, TTL: ttl, Wait: wait, Watchdog: r.Watchdog != nil && *r.Watchdog}
	switch hold, err := durationField(r.MaxHoldms, l.MaxHold, 1, l.MaxHold); {
	case err != nil:
		bad = append(bad, InvalidParam{Name: "max_hold_ms", Reason: err.Error()})
	case r.MaxHoldms != nil && !a.Watchdog:
		bad = append(bad, InvalidParam{Name: "max_hold_ms", Reason: "applies only to watchdog leases (set \"watchdog\": true)"})
	case a.Watchdog:
		a.MaxHold = hold
	}
	switch {
	case r.QueueTicket != "" && a.Wait == 0:
		bad = append(bad, InvalidParam{Name: "queue_ticket", Reason: "applies only to waiting requests (set \"wait_ms\" > 0)"})
	case len(r.QueueTicket) > MaxTicketLen:
		bad = append(bad, InvalidParam{Name: "queue_ticket", Reason: fmt.Sprintf("must be at most %d bytes long", MaxTicketLen)})
	default:
		a.QueueTicket = r.QueueTicket
	}
	return a, bad
}

// Validate checks r against l. A zero TTL in the result means "the lease's own TTL".
func (r RenewRequest) Validate(l Limits) (time.Duration, []InvalidParam) {
	ttl, err := durationField(r.TTLms, 0, 1, l.MaxTTL)
	if err != nil {
		return 0, []InvalidParam{{Name: "ttl_ms", Reason: err.Error()}}
	}
	return ttl, nil
}

// waitField turns an optional wait_ms into a wait of at most max: a longer one is capped, as
// long-polls conventionally are (Consul's ?wait=), since the client learns from the 409's
// waited_ms how long it waited and asks again with its queue ticket. A negative one is refused.
func waitField(ms *int64, max time.Duration) (time.Duration, error) {
	if ms == nil {
		return 0, nil
	}
	if *ms < 0 {
		return 0, fmt.Errorf("must be 0 or more milliseconds (more than %d, the configured maximum, is capped to it), got %d", max.Milliseconds(), *ms)
	}
	return time.Duration(min(*ms, max.Milliseconds())) * time.Millisecond, nil
}

// durationField turns an optional millisecond count into a duration within [minms, max].
func durationField(ms *int64, def time.Duration, minms int64, max time.Duration) (time.Duration, error) {
	if ms == nil {
		return def, nil
	}
	if *ms < minms || *ms > max.Milliseconds() {
		return 0, fmt.Errorf("must be between %d and %d milliseconds (the configured maximum), got %d", minms, max.Milliseconds(), *ms)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}
