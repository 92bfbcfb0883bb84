// Package auth is leasegate's identities and permissions: the principals of the auth file
// (LEASEGATE_AUTH_FILE), found by the hash of their API key, each allowed some permissions on
// some lock-name prefixes. It knows nothing of HTTP; the handlers map its errors to 401 and 403.
package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Permission is one kind of access a principal may be given.
type Permission string

const (
	// Lock allows acquiring, re-entering, renewing and releasing one's own leases: locks,
	// semaphores and multi-locks.
	Lock Permission = "lock"
	// Inspect allows reading a lock's or a semaphore's state and following its events.
	Inspect Permission = "inspect"
	// Admin allows the listings, /admin/*, force releases, the dashboard (and /metrics when
	// LEASEGATE_METRICS_AUTH=admin).
	Admin Permission = "admin"
)

// permissions are every Permission, in the order the docs list them.
var permissions = []Permission{Lock, Inspect, Admin}

// AllNames is the prefix that covers every name.
const AllNames = "*"

// Quotas are a principal's own quotas (the auth file's "quotas" member), in place of the gateway's
// defaults (LEASEGATE_QUOTA_RATE, _BURST, _PARKED, _STREAMS and _HELD): a nil field keeps the
// default, 0 means no limit. A principal of a JWT's claims has none.
type Quotas struct {
	Rate    *float64 `json:"rate"`    // requests per second on one replica
	Burst   *int     `json:"burst"`   // the rate's bucket size (default: the rate, at least 1)
	Parked  *int     `json:"parked"`  // waiting requests parked at once on one replica
	Streams *int     `json:"streams"` // event streams open at once on one replica
	Held    *int     `json:"held"`    // locks and permits held at once across replicas
}

// check refuses negative quotas.
func (q Quotas) check() error {
	if q.Rate != nil && *q.Rate < 0 {
		return fmt.Errorf(`"quotas": "rate" must not be negative, got %g`, *q.Rate)
	}
	for _, v := range []struct {
		name string
		n    *int
	}{{"burst", q.Burst}, {"parked", q.Parked}, {"streams", q.Streams}, {"held", q.Held}} {
		if v.n != nil && *v.n < 0 {
			return fmt.Errorf(`"quotas": %q must not be negative, got %d`, v.name, *v.n)
		}
	}
	return nil
}

// Principal is one identity of the auth file. A Principal is never changed once loaded: a reload
// builds new ones, so it is safe for concurrent use.
type Principal struct {
	Name        string
	Prefixes    []string // lock-name prefixes, or AllNames
	Permissions []Permission
	Quotas      Quotas // its own quotas, in place of the gateway's defaults
	all         bool   // Prefixes holds AllNames
	perms       uint8
}

func (p *Principal) bit(perm Permission) uint8 {
	if i := slices.Index(permissions, perm); i >= 0 {
		return 1 << i
	}
	return 0
}

// Has reports whether p was given perm.
func (p *Principal) Has(perm Permission) bool { return p.perms&p.bit(perm) != 0 }

// AllowsName reports whether name starts with one of p's prefixes.
func (p *Principal) AllowsName(name string) bool {
	if p.all {
		return true
	}
	for _, prefix := range p.Prefixes {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// AllowsAll reports whether p may use every name (its prefixes hold "*").
func (p *Principal) AllowsAll() bool { return p.all }

// Authorize returns nil when p has perm and may use every one of names, else a *ForbiddenError
// naming the permission or the first name it may not use.
func (p *Principal) Authorize(perm Permission, names ...string) error {
	if !p.Has(perm) {
		return &ForbiddenError{Principal: p.Name, Permission: perm}
	}
	for _, name := range names {
		if !p.AllowsName(name) {
			return &ForbiddenError{Principal: p.Name, Name: name, Prefixes: p.Prefixes}
		}
	}
	return nil
}

// AuthorizeAll is Authorize for what shows every name (the top lists, the dashboard, the
// metrics): p needs perm and the prefix "*".
func (p *Principal) AuthorizeAll(perm Permission) error {
	if err := p.Authorize(perm); err != nil {
		return err
	}
	if !p.all {
		return &ForbiddenError{Principal: p.Name, AllNames: true, Prefixes: p.Prefixes}
	}
	return nil
}

// AuthorizeListing is Authorize for a listing of the names that start with prefix: the listing
// must stay within one of p's prefixes ("" lists every name, so it needs "*").
func (p *Principal) AuthorizeListing(perm Permission, prefix string) error {
	if err := p.Authorize(perm); err != nil {
		return err
	}
	if !p.AllowsName(prefix) {
		return &ForbiddenError{Principal: p.Name, ListPrefix: prefix, Listing: true, Prefixes: p.Prefixes}
	}
	return nil
}
