package faultcheck

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

// tracedOp is one request the workload sent, as its client saw it.
type tracedOp struct {
	at, answered time.Time
	method, path string
	who          string // the owner the request speaks for: its body's, or its lease token's
	key          string // its Idempotency-Key
	outcome      string // the status and a short body, or the transport error
}

// trace records one request for the trail.
func (h *history) trace(at time.Time, method, path string, hs harness.Headers, body string, r *harness.Response, err error) {
	op := tracedOp{at: at, answered: time.Now(), method: method, path: path, key: hs["Idempotency-Key"], who: ownerOf(body, hs["Lease-Token"])}
	switch {
	case err != nil:
		op.outcome = "error: " + err.Error()
	default:
		b := strings.TrimSpace(string(r.Body))
		op.outcome = fmt.Sprintf("%d %.160s", r.Status, b)
	}
	h.mu.Lock()
	h.trail = append(h.trail, op)
	h.mu.Unlock()
}

// ownerOf reads the owner from a request body, else from a lease token's payload.
func ownerOf(body, token string) string {
	var v struct {
		Owner string `json:"owner"`
	}
	if json.Unmarshal([]byte(body), &v) == nil && v.Owner != "" {
		return v.Owner
	}
	payload, _, _ := strings.Cut(token, ".")
	if raw, err := base64.RawURLEncoding.DecodeString(payload); err == nil && json.Unmarshal(raw, &v) == nil {
		return v.Owner + " (token)"
	}
	return ""
}

// trails spells out, for each lock with two valid leases believed held at once, the requests on
// that lock from 4 s before the later lease's grant to 1 s after it.
func (h *history) trails(byLock map[string][]*held, valid func(*held) bool) []string {
	var out []string
	for lock, gs := range byLock {
		var last *held
		var lastTo time.Time
		for _, g := range gs {
			if !valid(g) {
				continue
			}
			from, to := g.believed()
			if last != nil && from.Before(lastTo) {
				out = append(out, h.trailOf(lock, from.Add(-4*time.Second), from.Add(time.Second)))
				break
			}
			if to.After(lastTo) {
				last, lastTo = g, to
			}
		}
	}
	slices.Sort(out)
	return out
}

// trailOf lists the requests on lock sent from..to.
func (h *history) trailOf(lock string, from, to time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests on %s from %s to %s:", lock, from.Format("15:04:05.000"), to.Format("15:04:05.000"))
	for _, op := range h.trail {
		if op.at.Before(from) || op.at.After(to) || !strings.Contains(op.path, "/"+lock) {
			continue
		}
		fmt.Fprintf(&b, "\n  %s-%s %s %s who=%s key=%s -> %s", op.at.Format("15:04:05.000"), op.answered.Format("05.000"),
			op.method, op.path, op.who, op.key, op.outcome)
	}
	return b.String()
}
