package api

import (
	"fmt"
	"strings"
)

// ListedLock is one held lock in GET /locks. Owner, Fence, TTLms and Watchdog are the exclusive
// holder's, or for shared holds the first (soonest to expire) shared holder's; Holders counts the
// holders; AgeMs is the time since the oldest listed hold's grant (from its fence, the Redis time
// of the grant).
type ListedLock struct {
	Lock      string `json:"lock"`
	Mode      string `json:"mode"`
	Owner     string `json:"owner"`
	Holders   int64  `json:"holders"`
	Fence     int64  `json:"fence"`
	AgeMs     int64  `json:"age_ms"`
	TTLms     int64  `json:"ttl_ms"`
	Watchdog  bool   `json:"watchdog"`
	Waiters   int64  `json:"waiters"`
	Multilock string `json:"multilock,omitempty"`
}

// LockList is the body of GET /locks: one page, and the cursor of the next ("" at the end).
type LockList struct {
	Locks      []ListedLock `json:"locks"`
	NextCursor string       `json:"next_cursor"`
}

// ListedSemaphore is one semaphore with permits in use in GET /semaphores.
type ListedSemaphore struct {
	Name    string `json:"name"`
	Permits int64  `json:"permits"`
	Used    int64  `json:"used"`
	Waiters int64  `json:"waiters"`
	AgeMs   int64  `json:"age_ms"` // since the oldest listed permit's grant
}

// SemaphoreList is the body of GET /semaphores.
type SemaphoreList struct {
	Semaphores []ListedSemaphore `json:"semaphores"`
	NextCursor string            `json:"next_cursor"`
}

// HeldLong is one entry of Top's longest-held list.
type HeldLong struct {
	Lock      string `json:"lock"`
	Kind      string `json:"kind"` // "lock" or "semaphore"
	Owner     string `json:"owner"`
	Fence     int64  `json:"fence"`
	AgeMs     int64  `json:"age_ms"`
	Multilock string `json:"multilock,omitempty"`
}

// ContendedLock is one entry of Top's most-contended list.
type ContendedLock struct {
	Lock  string `json:"lock"`
	Kind  string `json:"kind"`
	Count int64  `json:"count"` // 409s and waits started on this replica in the window
}

// Top is the body of GET /admin/top.
type Top struct {
	LongestHeld   []HeldLong      `json:"longest_held"`
	MostContended []ContendedLock `json:"most_contended"`
	WindowS       int64           `json:"window_s"`
	LongHoldMs    int64           `json:"long_hold_ms"` // LEASEGATE_LONG_HOLD
}

// MaxListLimit bounds a listing's page size.
const MaxListLimit = 1000

// ValidateNamePrefix checks a listing's name prefix: empty, or up to 200 bytes of a name's
// characters.
func ValidateNamePrefix(prefix string) error {
	if len(prefix) > MaxLockNameLen {
		return fmt.Errorf("must be at most %d bytes, got %d", MaxLockNameLen, len(prefix))
	}
	if i := strings.IndexFunc(prefix, func(c rune) bool { return !nameChar(c) }); i >= 0 {
		return fmt.Errorf("may hold only letters, digits and . _ : - (a name's characters), got %q at %d", prefix[i], i)
	}
	return nil
}
