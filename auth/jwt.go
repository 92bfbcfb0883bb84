package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// jwtFormat is the auth file's "jwt" member (docs/auth.md): where the verification keys are, what
// a token must say, and which claims name its principal, prefixes and permissions.
type jwtFormat struct {
	JWKSFile         string   `json:"jwks_file"`
	PublicKeyFile    string   `json:"public_key_file"`
	Issuer           string   `json:"issuer"`
	Audience         string   `json:"audience"`
	Algorithms       []string `json:"algorithms"`
	PrincipalClaim   string   `json:"principal_claim"`
	PrefixesClaim    string   `json:"prefixes_claim"`
	PermissionsClaim string   `json:"permissions_claim"`
	PrincipalPrefix  *string  `json:"principal_prefix"`
}

// jwtMembers are the member names of jwtFormat, for checkNames.
var jwtMembers = []string{"jwks_file", "public_key_file", "issuer", "audience", "algorithms",
	"principal_claim", "prefixes_claim", "permissions_claim", "principal_prefix"}

// The documented defaults of the "jwt" member.
const (
	defaultPrincipalClaim   = "sub"
	defaultPrefixesClaim    = "leasegate_prefixes"
	defaultPermissionsClaim = "leasegate_permissions"
	defaultPrincipalPrefix  = "jwt:"
	// JWTLeeway is the clock skew allowed when checking exp and nbf.
	JWTLeeway = 30 * time.Second
	// maxJWTLen bounds what a verifier parses.
	maxJWTLen = 16 << 10
	// maxJWTPrincipalLen bounds a JWT principal's name (principal_prefix included): Kubernetes
	// service-account subjects (system:serviceaccount:NS:NAME) can exceed the 64 of the file's.
	maxJWTPrincipalLen = 256
)

// defaultAlgorithms are the algorithms accepted when "algorithms" is not given.
var defaultAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// asymmetricAlgorithms are those "algorithms" may name: never "none", never HMAC (a public key
// used as an HMAC secret would let anyone who has it sign).
var asymmetricAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512", "EdDSA"}

// jwtVerifier checks bearer JWTs against the keys of one file. Immutable once built.
type jwtVerifier struct {
	keyFile          string // absolute or relative to the working directory, as it was read
	keys             jwt.Keyfunc
	parser           *jwt.Parser
	principalClaim   string
	prefixesClaim    string
	permissionsClaim string
	principalPrefix  string

	// verified caches the principals of tokens verified, by the SHA-256 of the token, until the
	// token's exp (plus leeway): a token's signature, iss and aud do not change, and the cache goes
	// with the Config on a reload, so a hit only skips repeating the signature check (tens of µs).
	mu       sync.Mutex
	verified map[[sha256.Size]byte]verifiedJWT
}

type verifiedJWT struct {
	p       *Principal
	expires time.Time
}

// maxVerifiedJWTs bounds the cache (about 100 bytes an entry).
const maxVerifiedJWTs = 10000

func (v *jwtVerifier) cached(sum [sha256.Size]byte, now time.Time) *Principal {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.verified[sum]
	if !ok {
		return nil
	}
	if !now.Before(e.expires) {
		delete(v.verified, sum)
		return nil
	}
	return e.p
}

func (v *jwtVerifier) remember(sum [sha256.Size]byte, p *Principal, expires time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.verified) >= maxVerifiedJWTs {
		now := time.Now()
		for k, e := range v.verified {
			if !now.Before(e.expires) {
				delete(v.verified, k)
			}
		}
		if len(v.verified) >= maxVerifiedJWTs {
			clear(v.verified)
		}
	}
	v.verified[sum] = verifiedJWT{p, expires}
}

// newJWTVerifier checks f and reads its key file; dir is the auth file's directory, which relative
// key file paths are taken from.
func newJWTVerifier(f jwtFormat, dir string) (*jwtVerifier, error) {
	if (f.JWKSFile == "") == (f.PublicKeyFile == "") {
		return nil, errors.New(`give exactly one of "jwks_file" and "public_key_file"`)
	}
	if f.Issuer == "" || f.Audience == "" {
		return nil, errors.New(`"issuer" and "audience" are required: a token is accepted only when its iss and aud match them`)
	}
	algs := f.Algorithms
	if len(algs) == 0 {
		algs = defaultAlgorithms
	}
	for _, a := range algs {
		if !slices.Contains(asymmetricAlgorithms, a) {
			return nil, fmt.Errorf(`algorithm %q is not accepted: give some of %s (never "none", never HMAC)`, a, strings.Join(asymmetricAlgorithms, ", "))
		}
	}
	v := &jwtVerifier{
		principalClaim:   orDefault(f.PrincipalClaim, defaultPrincipalClaim),
		prefixesClaim:    orDefault(f.PrefixesClaim, defaultPrefixesClaim),
		permissionsClaim: orDefault(f.PermissionsClaim, defaultPermissionsClaim),
		principalPrefix:  defaultPrincipalPrefix,
		verified:         map[[sha256.Size]byte]verifiedJWT{},
		parser: jwt.NewParser(jwt.WithValidMethods(algs), jwt.WithIssuer(f.Issuer), jwt.WithAudience(f.Audience),
			jwt.WithExpirationRequired(), jwt.WithLeeway(JWTLeeway)),
	}
	if f.PrincipalPrefix != nil {
		v.principalPrefix = *f.PrincipalPrefix
		if v.principalPrefix == "" || len(v.principalPrefix) > 32 || strings.IndexFunc(v.principalPrefix, func(r rune) bool { return !nameChar(r) && r != '@' }) >= 0 {
			return nil, fmt.Errorf(`"principal_prefix" %q must be 1-32 characters of A-Z a-z 0-9 . _ : @ -: it keeps JWT principals apart from the file's`, v.principalPrefix)
		}
	}
	var err error
	if f.JWKSFile != "" {
		v.keyFile = relativeTo(dir, f.JWKSFile)
		v.keys, err = readJWKS(v.keyFile)
	} else {
		v.keyFile = relativeTo(dir, f.PublicKeyFile)
		v.keys, err = readPublicKeys(v.keyFile)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func relativeTo(dir, path string) string {
	if filepath.IsAbs(path) || dir == "" {
		return path
	}
	return filepath.Join(dir, path)
}

// readJWKS reads a JWK Set file (RFC 7517) with keyfunc: a token's "kid" picks its key; a token
// without one is tried against every key.
func readJWKS(path string) (jwt.Keyfunc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf(`"jwks_file": %w`, err)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil || len(set.Keys) == 0 {
		return nil, fmt.Errorf(`"jwks_file" %s: not a JWK Set ({"keys": [...]}) with a key in it`, path)
	}
	k, err := keyfunc.NewJWKSetJSON(data)
	if err != nil {
		return nil, fmt.Errorf(`"jwks_file" %s: %w`, path, err)
	}
	return k.Keyfunc, nil
}

// readPublicKeys reads every "PUBLIC KEY" (PKIX: RSA, ECDSA or Ed25519) and "CERTIFICATE" block of
// a PEM file; a token is tried against each key.
func readPublicKeys(path string) (jwt.Keyfunc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf(`"public_key_file": %w`, err)
	}
	var set jwt.VerificationKeySet
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		var key any
		switch block.Type {
		case "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				key = cert.PublicKey
			}
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf(`"public_key_file" %s: %w`, path, err)
		}
		set.Keys = append(set.Keys, key)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf(`"public_key_file" %s: no PEM "PUBLIC KEY" or "CERTIFICATE" in it`, path)
	}
	return func(*jwt.Token) (any, error) { return set, nil }, nil
}

// looksLikeJWT reports whether a bearer value has a JWT's shape (three dot-separated parts; API
// keys are base64url, which has no dots).
func looksLikeJWT(bearer string) bool { return strings.Count(bearer, ".") == 2 }

// verify checks token's signature, alg, exp, nbf, iss and aud, and returns its principal: named
// principalPrefix and the principal claim's value, with the prefixes and permissions of its
// claims, unless named holds a principal of that name (from the auth file), returned instead.
func (v *jwtVerifier) verify(token string, named map[string]*Principal) (*Principal, error) {
	if len(token) > maxJWTLen {
		return nil, fmt.Errorf("%w: the JWT is longer than %d bytes", ErrUnauthenticated, maxJWTLen)
	}
	sum := sha256.Sum256([]byte(token))
	if p := v.cached(sum, time.Now()); p != nil {
		return p, nil
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.keys); err != nil {
		return nil, fmt.Errorf("%w: the JWT is not accepted: %w", ErrUnauthenticated, err)
	}
	p, err := v.principal(claims, named)
	if err != nil {
		return nil, err
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		v.remember(sum, p, exp.Add(JWTLeeway))
	}
	return p, nil
}

// principal reads a verified token's principal from its claims.
func (v *jwtVerifier) principal(claims jwt.MapClaims, named map[string]*Principal) (*Principal, error) {
	sub, _ := claims[v.principalClaim].(string)
	name := v.principalPrefix + sub
	if sub == "" || len(name) > maxJWTPrincipalLen || strings.IndexFunc(sub, func(r rune) bool { return !nameChar(r) && r != '@' }) >= 0 {
		return nil, fmt.Errorf("%w: the JWT's %q claim must be 1-%d characters of A-Z a-z 0-9 . _ : @ -",
			ErrUnauthenticated, v.principalClaim, maxJWTPrincipalLen-len(v.principalPrefix))
	}
	if p, ok := named[name]; ok {
		return p, nil
	}
	p := &Principal{Name: name}
	prefixes, err := stringsClaim(claims, v.prefixesClaim)
	if err != nil {
		return nil, err
	}
	for _, prefix := range prefixes {
		if prefix == AllNames {
			p.all = true
		} else if err := checkPrefix(prefix); err != nil {
			return nil, fmt.Errorf("%w: the JWT's %q claim: %w", ErrUnauthenticated, v.prefixesClaim, err)
		}
	}
	p.Prefixes = prefixes
	perms, err := stringsClaim(claims, v.permissionsClaim)
	if err != nil {
		return nil, err
	}
	// Values that are no permission are ignored, so that a claim shared with other services
	// (e.g. "scope") may be used.
	for _, s := range perms {
		if b := p.bit(Permission(s)); b != 0 && p.perms&b == 0 {
			p.perms |= b
			p.Permissions = append(p.Permissions, Permission(s))
		}
	}
	return p, nil
}

// stringsClaim reads a claim that is an array of strings or one string of space-separated values
// (as OAuth's "scope"); an absent claim is empty.
func stringsClaim(claims jwt.MapClaims, name string) ([]string, error) {
	switch v := claims[name].(type) {
	case nil:
		return nil, nil
	case string:
		return strings.Fields(v), nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%w: the JWT's %q claim must be strings", ErrUnauthenticated, name)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: the JWT's %q claim must be an array of strings or a space-separated string", ErrUnauthenticated, name)
}
