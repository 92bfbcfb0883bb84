package testkit

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/leasegate/leasegate/internal/harness"
)

// The bodies and headers of the API's requests, as the tests spell them (openapi.yaml has the
// contract; harness.Client validates every exchange against it).

// AcquireBody renders an acquire request body.
func AcquireBody(owner string, ttlMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d}`, owner, ttlMs)
}

// WaitBody renders an acquire request body that waits up to waitMs.
func WaitBody(owner string, ttlMs, waitMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d}`, owner, ttlMs, waitMs)
}

// WatchdogBody renders an acquire request body with the watchdog on; extra is appended to its
// members (e.g. `,"wait_ms":1000`).
func WatchdogBody(owner string, ttlMs int64, extra string) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"watchdog":true%s}`, owner, ttlMs, extra)
}

// SharedBody renders an acquire request body for a shared (read) hold.
func SharedBody(owner string, ttlMs, waitMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d,"mode":"shared"}`, owner, ttlMs, waitMs)
}

// PermitBody renders a semaphore acquire request body.
func PermitBody(owner string, permits, ttlMs, waitMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"permits":%d,"ttl_ms":%d,"wait_ms":%d}`, owner, permits, ttlMs, waitMs)
}

// MultiBody renders a multi-lock request body; extra is appended to its members.
func MultiBody(owner string, locks []string, ttlMs, waitMs int64, extra string) string {
	names, _ := json.Marshal(locks)
	return fmt.Sprintf(`{"owner":%q,"locks":%s,"ttl_ms":%d,"wait_ms":%d%s}`, owner, names, ttlMs, waitMs, extra)
}

// LockAll posts a multi-lock request through c.
func LockAll(c *harness.Client, owner string, locks []string, ttlMs, waitMs int64, extra string) *harness.Response {
	return c.Do(http.MethodPost, "/multilocks", nil, MultiBody(owner, locks, ttlMs, waitMs, extra))
}

// TokenHeader is the Lease-Token header carrying token.
func TokenHeader(token string) harness.Headers { return harness.Headers{"Lease-Token": token} }

// Strings reads a JSON array of strings from a body member.
func Strings(r *harness.Response, key string) []string {
	var out []string
	list, _ := r.JSON()[key].([]any)
	for _, v := range list {
		out = append(out, v.(string))
	}
	return out
}

// ListedWaiter is one waiter of a lock as GET /locks lists it.
type ListedWaiter struct {
	Owner     string `json:"owner"`
	Since     string `json:"since"` // its arrival in the line
	Multilock string `json:"multilock"`
}

// Waiting lists the waiters of the held lock in line order, as GET /locks?prefix=lock shows them
// through c (nil when it cannot be read, or the lock is not listed).
func Waiting(c *harness.Client, lock string) []ListedWaiter {
	r := c.Do(http.MethodGet, "/locks?prefix="+lock, nil, "")
	if r.Status != http.StatusOK {
		return nil
	}
	var list struct {
		Locks []struct {
			Lock    string         `json:"lock"`
			Waiting []ListedWaiter `json:"waiting"`
		} `json:"locks"`
	}
	if json.Unmarshal(r.Body, &list) != nil {
		return nil
	}
	for _, l := range list.Locks {
		if l.Lock == lock {
			return l.Waiting
		}
	}
	return nil
}
