package lockcore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// MultiLease identifies one grant of a multi-lock: the lease that holds every member.
type MultiLease struct {
	ID    string   `json:"lease"` // "m-" + a UUID; the group's id
	Owner string   `json:"owner"`
	Locks []string `json:"locks"` // the members, sorted, distinct
	Mode  Mode     `json:"mode"`
	// Principal is the principal that took the group, as Lease.Principal.
	Principal string `json:"principal,omitempty"`
}

// multiLeasePrefix starts every multi-lock lease ID, so that a member's holder shows which group
// holds it, and a lock token (whose lease must be a bare UUID) can never name a group's lease.
const multiLeasePrefix = "m-"

// GroupOf returns the id of the multi-lock a holder's lease belongs to, "" for a lease of its own.
func GroupOf(lease string) string {
	if strings.HasPrefix(lease, multiLeasePrefix) {
		return lease
	}
	return ""
}

// MintMulti returns the token of multi-lock lease m, signed in a domain of its own so that it never
// passes for a lock's or a semaphore's token.
func (t *Tokens) MintMulti(m MultiLease) string {
	payload, _ := json.Marshal(struct {
		V int `json:"v"`
		MultiLease
	}{1, m}) // cannot fail: strings only
	return t.seal(multiDomain, payload)
}

// ParseMulti verifies a multi-lock token and returns its lease. It returns ErrInvalidToken when the
// token is malformed, forged, a lock's or semaphore's, or (id not "") minted for another group.
func (t *Tokens) ParseMulti(token, id string) (MultiLease, error) {
	if token == "" {
		return MultiLease{}, fmt.Errorf("%w: missing", ErrInvalidToken)
	}
	if len(token) > maxMultiTokenLen {
		return MultiLease{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidToken, maxMultiTokenLen)
	}
	raw, err := t.verify(multiDomain, token)
	if err != nil {
		for _, k := range kinds {
			if _, e := t.verify(leaseDomains[k], token); e == nil {
				return MultiLease{}, fmt.Errorf("%w: %s's token, not a multi-lock's", ErrInvalidToken, k.withArticle())
			}
		}
		return MultiLease{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	var p struct {
		V int `json:"v"`
		MultiLease
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.V != 1 || !validMultiLease(p.MultiLease) {
		return MultiLease{}, fmt.Errorf("%w: payload is not a version 1 multi-lock lease", ErrInvalidToken)
	}
	if id != "" && id != p.ID {
		return MultiLease{}, fmt.Errorf("%w: minted for multi-lock %s, not %s", ErrInvalidToken, p.ID, id)
	}
	return p.MultiLease, nil
}

// IsMultiLockID reports whether id has the form of a multi-lock's id: "m-" and a UUID.
func IsMultiLockID(id string) bool {
	rest, ok := strings.CutPrefix(id, multiLeasePrefix)
	return ok && len(rest) == 36 && uuid.Validate(rest) == nil
}

func validMultiLease(m MultiLease) bool {
	return IsMultiLockID(m.ID) && len(m.Locks) >= 2 && slices.IsSorted(m.Locks) && len(slices.Compact(slices.Clone(m.Locks))) == len(m.Locks) &&
		(m.Mode == Exclusive || m.Mode == Shared)
}
