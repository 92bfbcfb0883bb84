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
	// HeldBy lists every holder: the exclusive one, then the shared ones (the first 100, soonest to
	// expire first). Waiting lists the first 20 waiters (lockcore.ListedWaiters), in line order.
	HeldBy  []ListedHolder `json:"held_by"`
	Waiting []ListedWaiter `json:"waiting"`
}

// ListedHolder is one hold in a listing. Mode is a lock's ("exclusive" or "shared"), absent for a
// semaphore's permit; AgeMs is the time since its grant; Multilock the id of the multi-lock whose
// member it is: the same id on several locks is one group's lease.
type ListedHolder struct {
	// Owner is, for a Redisson client's hold (Redisson), its field in Redisson's hash.
	Owner     string `json:"owner"`
	Mode      string `json:"mode,omitempty"`
	Fence     int64  `json:"fence"`
	Holds     int64  `json:"holds"`
	AgeMs     int64  `json:"age_ms"`
	TTLms     int64  `json:"ttl_ms"`
	Watchdog  bool   `json:"watchdog"`
	Multilock string `json:"multilock,omitempty"`
	// Redisson marks a Redisson client's hold of a name shared with Redisson: no fence, no age.
	Redisson bool `json:"redisson,omitempty"`
}

// ListedWaiter is one waiter in a listing: who, for which hold (Mode, absent for a semaphore), and
// since when (Since: its arrival in the line, Redis time; WaitedMs: until the listing read it).
// Multilock is set when the waiter is a multi-lock waiting for this member.
type ListedWaiter struct {
	Owner     string    `json:"owner"`
	Mode      string    `json:"mode,omitempty"`
	Since     Timestamp `json:"since"`
	WaitedMs  int64     `json:"waited_ms"`
	Multilock string    `json:"multilock,omitempty"`
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
	// HeldBy lists the permits' holders (the first 100, soonest to expire first); Waiting the first 20
	// waiters, in line order.
	HeldBy  []ListedHolder `json:"held_by"`
	Waiting []ListedWaiter `json:"waiting"`
}

// SemaphoreList is the body of GET /semaphores.
type SemaphoreList struct {
	Semaphores []ListedSemaphore `json:"semaphores"`
	NextCursor string            `json:"next_cursor"`
}

// ElectionList is the body of GET /elections: one page of the elections led or with candidates,
// each as GET /elections/{name} reads it, and the cursor of the next page ("" at the end).
type ElectionList struct {
	Elections  []ElectionState `json:"elections"`
	NextCursor string          `json:"next_cursor"`
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
