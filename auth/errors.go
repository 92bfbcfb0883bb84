package auth

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnauthenticated: the request carries no credential, or one no principal has. The handlers
// answer it 401 with WWW-Authenticate: Bearer.
var ErrUnauthenticated = errors.New("unauthenticated")

// ForbiddenError: an authenticated principal asked for what it was not given. Exactly one of
// Permission, Name, Listing, AllNames and TokenPrincipal says what is missing.
type ForbiddenError struct {
	Principal string
	// Permission is the permission the principal lacks.
	Permission Permission
	// Name is a lock (or semaphore) name outside the principal's Prefixes.
	Name string
	// Listing: a listing of the names under ListPrefix, which no prefix of the principal covers.
	Listing    bool
	ListPrefix string
	// AllNames: the route shows every name, so it needs the prefix "*".
	AllNames bool
	// Token: the lease token belongs to TokenPrincipal ("" for a token minted without
	// authentication), not to Principal.
	Token          bool
	TokenPrincipal string
	Prefixes       []string
}

func (e *ForbiddenError) Error() string {
	who := fmt.Sprintf("principal %q", e.Principal)
	switch {
	case e.Permission != "":
		return fmt.Sprintf("%s lacks the %q permission", who, e.Permission)
	case e.Token && e.TokenPrincipal == "":
		return who + " may not use this lease token: it was minted without authentication; acquire anew"
	case e.Token:
		return fmt.Sprintf("%s may not use this lease token: it belongs to principal %q", who, e.TokenPrincipal)
	case e.AllNames:
		return fmt.Sprintf("%s lacks the prefix %q: this route shows every name (its prefixes: %s)", who, AllNames, quoted(e.Prefixes))
	case e.Listing:
		return fmt.Sprintf("%s may not list the names under %q: the prefix parameter must start with one of its prefixes (%s)",
			who, e.ListPrefix, quoted(e.Prefixes))
	}
	return fmt.Sprintf("%s may not use the name %q: no prefix of its covers it (its prefixes: %s)", who, e.Name, quoted(e.Prefixes))
}

func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// TokenOwner returns nil when a lease token minted for tokenPrincipal may be used by p, else a
// *ForbiddenError: a lease belongs to the principal that took it.
func (p *Principal) TokenOwner(tokenPrincipal string) error {
	if tokenPrincipal == p.Name {
		return nil
	}
	return &ForbiddenError{Principal: p.Name, Token: true, TokenPrincipal: tokenPrincipal}
}
