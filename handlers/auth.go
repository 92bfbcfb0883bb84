package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/lockcore"
)

// Authenticator finds the principal of a bearer value (an API key or a JWT) or of a verified
// client certificate's subject, or returns an error wrapping auth.ErrUnauthenticated;
// *auth.Store implements it (reloading its file meanwhile).
type Authenticator interface {
	Authenticate(bearer string) (*auth.Principal, error)
	AuthenticateCertificate(subject string) (*auth.Principal, error)
}

// authorizationHeader carries "Bearer <API key or JWT>".
const authorizationHeader = "Authorization"

// scope says which names a route touches, so that guard checks them against the principal's
// prefixes.
type scope int

const (
	// scopeName: the {name} path parameter, a lock's or a semaphore's.
	scopeName scope = iota
	// scopeMulti: /multilocks. The members of a Lease-Token's group are checked here; those of an
	// acquire's body by the handler, once decoded (acquireMulti).
	scopeMulti
	// scopeListing: the names a listing's prefix query parameter selects.
	scopeListing
	// scopeAll: every name (the top lists, the dashboard, the metrics).
	scopeAll
)

// guard authenticates and authorizes the requests of the routes it wraps. With no Authenticator
// (no LEASEGATE_AUTH_FILE) it wraps nothing: everything is open, at no cost.
type guard struct {
	auth Authenticator
	log  *slog.Logger
	// quotas: the principal's requests per second are taken here, once it is known
	quotas *quotas
	// failures: the failed authentications of each client address (nil: not limited), which
	// proxies tells
	failures *failedAuths
	proxies  TrustedProxies
}

// need wraps a route's handler: the request must carry the API key of a principal that has perm
// on the names of sc, and any Lease-Token it carries must be that principal's. Otherwise it is
// answered 401 or 403 (or 400 for a bad {name}), before anything touches Redis. On a {name}
// route, a force release (?force) needs auth.Admin instead of auth.Lock. The handler finds the
// principal with principalFrom.
func (g *guard) need(perm auth.Permission, sc scope, next http.HandlerFunc) http.HandlerFunc {
	if g.auth == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		addr := r.RemoteAddr
		if a, ok := g.proxies.client(r); ok {
			addr = throttleKey(a)
		}
		err := g.failures.check(addr)
		var p *auth.Principal
		if err == nil {
			p, err = g.authorize(r, perm, sc)
			if errors.Is(err, auth.ErrUnauthenticated) {
				g.failures.failed(addr)
			}
		}
		if err == nil {
			err = g.quotas.allow(p)
		}
		if err != nil {
			writeError(w, r, g.log, err)
			return
		}
		if info, ok := r.Context().Value(requestKey{}).(*requestInfo); ok {
			info.principal, info.authorizedBy, info.perm, info.scope = p, g, perm, sc
		}
		next(w, r)
	}
}

func (g *guard) authorize(r *http.Request, perm auth.Permission, sc scope) (*auth.Principal, error) {
	p, err := g.authenticate(r)
	if err != nil {
		return nil, err
	}
	switch sc {
	case scopeName:
		var name string
		if name, err = lockName(r); err != nil {
			return nil, err // the handler would answer the same 400
		}
		if perm == auth.Lock && r.URL.RawQuery != "" && r.URL.Query().Has("force") {
			perm = auth.Admin
		}
		err = p.Authorize(perm, name)
	case scopeMulti:
		err = p.Authorize(perm)
	case scopeListing:
		err = p.AuthorizeListing(perm, r.URL.Query().Get("prefix"))
	case scopeAll:
		err = p.AuthorizeAll(perm)
	}
	if err != nil {
		return nil, err
	}
	if token := r.Header.Get(leaseTokenHeader); token != "" {
		// Unverified here: lockcore verifies the signature next, before using the token. A token
		// whose payload does not even decode is lockcore's to refuse (400).
		if claims, ok := lockcore.ReadClaims(token); ok {
			if err := p.TokenOwner(claims.Principal); err != nil {
				return nil, err
			}
			if err := p.Authorize(perm, claims.Locks...); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// authenticate returns the principal of the request's "Authorization: Bearer <API key or JWT>",
// or, without that header, the principal whose certificate_subjects hold the subject of the
// verified client certificate (LEASEGATE_TLS_CLIENT_CA_FILE). A request with both is the bearer's.
func (g *guard) authenticate(r *http.Request) (*auth.Principal, error) {
	values := r.Header.Values(authorizationHeader)
	switch len(values) {
	case 0:
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			subject := r.TLS.VerifiedChains[0][0].Subject.String()
			p, err := g.auth.AuthenticateCertificate(subject)
			if err != nil {
				return nil, fmt.Errorf("%w: the client certificate's subject %q is no principal's certificate_subjects; send Authorization: Bearer <API key or JWT>", err, subject)
			}
			return p, nil
		}
		return nil, fmt.Errorf("%w: send Authorization: Bearer <API key or JWT>", auth.ErrUnauthenticated)
	case 1:
	default:
		return nil, invalidRequest("the Authorization header appears more than once",
			[]api.InvalidParam{{Name: authorizationHeader, Reason: "must appear at most once"}})
	}
	scheme, key, _ := strings.Cut(values[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return nil, fmt.Errorf("%w: the Authorization header is not \"Bearer <API key or JWT>\"", auth.ErrUnauthenticated)
	}
	p, err := g.auth.Authenticate(strings.TrimSpace(key))
	if err == auth.ErrUnauthenticated { // the bare sentinel only: an API key no principal has
		if _, ok := lockcore.ReadClaims(strings.TrimSpace(key)); ok {
			return nil, fmt.Errorf("%w: the bearer value is a lease token, not an API key: send lease tokens as Lease-Token: <token>, "+
				"and the API key as Authorization: Bearer <key>", err)
		}
		return nil, fmt.Errorf("%w: the API key is not known (wrong, or revoked from the auth file)", err)
	}
	return p, err
}

// principalFrom returns the principal that authenticated the request, nil when the gateway runs
// without authentication.
func principalFrom(ctx context.Context) *auth.Principal {
	if info, ok := ctx.Value(requestKey{}).(*requestInfo); ok {
		return info.principal
	}
	return nil
}

// reauthorizer returns a check of r against the credentials in force now, as guard.need
// authorized it (an API key removed from the auth file, a JWT past its exp, a permission or prefix
// taken away all fail it), nil without authentication.
func reauthorizer(r *http.Request) func() error {
	info, ok := r.Context().Value(requestKey{}).(*requestInfo)
	if !ok || info.authorizedBy == nil {
		return nil
	}
	g, perm, sc := info.authorizedBy, info.perm, info.scope
	return func() error { _, err := g.authorize(r, perm, sc); return err }
}

// principalName is principalFrom's name, "" without authentication.
func principalName(ctx context.Context) string {
	if p := principalFrom(ctx); p != nil {
		return p.Name
	}
	return ""
}
