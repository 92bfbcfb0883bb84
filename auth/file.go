package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The auth file (LEASEGATE_AUTH_FILE) is JSON (docs/auth.md; deploy/auth.example.json):
//
//	{"principals": [{"name": "billing", "keys": ["sha256:<64 hex>"],
//	                 "prefixes": ["billing.", "shared.reports."], "permissions": ["lock", "inspect"],
//	                 "quotas": {"held": 500}}]}
//
// Member names match exactly and unknown members are errors, so that a typo never loosens the
// file. A principal's optional "quotas" ("rate", "burst", "parked", "streams", "held") replace the gateway's
// defaults for it. The top-level "jwt" member configures bearer JWTs (jwt.go); a principal's
// "certificate_subjects" are the verified client-certificate subjects that authenticate as it.

// fileFormat is the auth file as written.
type fileFormat struct {
	Principals []principalFormat `json:"principals"`
	JWT        *jwtFormat        `json:"jwt"`
}

type principalFormat struct {
	Name                string       `json:"name"`
	Keys                []string     `json:"keys"`
	Prefixes            []string     `json:"prefixes"`
	Permissions         []Permission `json:"permissions"`
	CertificateSubjects []string     `json:"certificate_subjects"`
	Quotas              Quotas       `json:"quotas"`
}

// keyHashPrefix starts every stored key hash.
const keyHashPrefix = "sha256:"

// Config is a loaded auth file: its principals, found by the SHA-256 of their API keys or by
// their client-certificate subjects, and the JWT verifier of its "jwt" member. A Config is never
// changed once built, so it is safe for concurrent use.
type Config struct {
	Principals []*Principal
	byKey      map[[sha256.Size]byte]*Principal
	bySubject  map[string]*Principal
	jwt        *jwtVerifier // nil without "jwt"
	// jwtNamed are the file's principals named like JWT principals: they give a JWT principal of
	// that name their prefixes and permissions instead of its token's claims.
	jwtNamed map[string]*Principal
}

// maxKeyLen bounds what Authenticate hashes: generated keys are 46 bytes.
const maxKeyLen = 512

// Authenticate returns the principal of a bearer value: when the file configures "jwt", a value of
// three dot-separated parts is a JWT (see jwtVerifier.verify); any other value is an API key, whose
// principal is the one whose stored hashes hold its SHA-256. It returns an error wrapping
// ErrUnauthenticated otherwise: ErrUnauthenticated itself for an unknown key. Keys are 256-bit random values, so one fast hash suffices: nobody can search
// that space, whatever the hash's speed; and comparing digests by map lookup leaks at most which
// digests are near, which says nothing of any key.
func (c *Config) Authenticate(key string) (*Principal, error) {
	jwtShaped := looksLikeJWT(key)
	if jwtShaped && c.jwt != nil {
		return c.jwt.verify(key, c.jwtNamed)
	}
	if key != "" && len(key) <= maxKeyLen {
		if p, ok := c.byKey[sha256.Sum256([]byte(key))]; ok {
			return p, nil
		}
	}
	if jwtShaped {
		return nil, fmt.Errorf(`%w: the bearer value looks like a JWT, and the auth file configures no "jwt" (nor is it a known API key)`, ErrUnauthenticated)
	}
	return nil, ErrUnauthenticated
}

// AuthenticateCertificate returns the principal whose "certificate_subjects" hold subject, the
// pkix.Name.String() of a verified client certificate, compared as exact strings; or
// ErrUnauthenticated.
func (c *Config) AuthenticateCertificate(subject string) (*Principal, error) {
	if p, ok := c.bySubject[subject]; ok {
		return p, nil
	}
	return nil, ErrUnauthenticated
}

// OwnHeldQuota returns the name of a principal with a "held" quota of its own ("" for none): it
// takes effect only while the gateway counts holds (LEASEGATE_QUOTA_HELD).
func (c *Config) OwnHeldQuota() string {
	for _, p := range c.Principals {
		if p.Quotas.Held != nil {
			return p.Name
		}
	}
	return ""
}

// KeyFile returns the JWKS or PEM file the "jwt" member names ("" without one), relative paths
// taken from the auth file's directory.
func (c *Config) KeyFile() string {
	if c.jwt == nil {
		return ""
	}
	return c.jwt.keyFile
}

// Parse reads an auth file's contents and checks every principal, naming the first problem of
// each in its error. Relative key file paths of its "jwt" member are taken from the working
// directory; Load takes them from the file's.
func Parse(data []byte) (*Config, error) { return parse(data, "") }

// Load reads and parses the auth file at path, and the key file its "jwt" member names.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parse(data, filepath.Dir(path))
}

func parse(data []byte, dir string) (*Config, error) {
	var f fileFormat
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	if len(f.Principals) == 0 && f.JWT == nil {
		return nil, errors.New(`"principals" is empty or missing, and there is no "jwt": nobody could call the gateway`)
	}
	c := &Config{byKey: map[[sha256.Size]byte]*Principal{}, bySubject: map[string]*Principal{}, jwtNamed: map[string]*Principal{}}
	if f.JWT != nil {
		v, err := newJWTVerifier(*f.JWT, dir)
		if err != nil {
			return nil, fmt.Errorf(`"jwt": %w`, err)
		}
		c.jwt = v
	}
	names := map[string]bool{}
	var errs []error
	for i, pf := range f.Principals {
		jwtNamed := c.jwt != nil && strings.HasPrefix(pf.Name, c.jwt.principalPrefix)
		p, hashes, err := checkPrincipal(pf, jwtNamed)
		if err == nil && names[p.Name] {
			err = fmt.Errorf("name %q is given twice", p.Name)
		}
		if err == nil && jwtNamed {
			if len(pf.Keys) > 0 || len(pf.CertificateSubjects) > 0 {
				err = fmt.Errorf(`name %q starts with the "jwt" member's principal_prefix %q: it gives a JWT principal its prefixes and permissions, and may have no "keys" nor "certificate_subjects"`, p.Name, c.jwt.principalPrefix)
			} else {
				c.jwtNamed[p.Name] = p
			}
		}
		if err == nil {
			for _, s := range pf.CertificateSubjects {
				if other, dup := c.bySubject[s]; dup {
					err = fmt.Errorf("certificate subject %q is also principal %q's: a subject names one principal", s, other.Name)
					break
				}
				c.bySubject[s] = p
			}
		}
		if err == nil {
			for _, h := range hashes {
				if other, dup := c.byKey[h]; dup {
					err = fmt.Errorf("a key hash is also principal %q's: a key names one principal", other.Name)
					break
				}
				c.byKey[h] = p
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("principals[%d] (%q): %w", i, pf.Name, err))
			continue
		}
		names[p.Name] = true
		c.Principals = append(c.Principals, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeStrict decodes one JSON object into v, refusing unknown members and trailing data.
// Member names still match case-insensitively in encoding/json; checkNames refuses other spellings.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a valid auth file: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("not a valid auth file: unexpected data after the JSON object")
	}
	return checkNames(data)
}

// checkNames refuses member names that encoding/json matched up to case ("Keys" for "keys").
func checkNames(data []byte) error {
	known := append([]string{"principals", "jwt", "name", "keys", "prefixes", "permissions", "certificate_subjects",
		"quotas", "rate", "burst", "parked", "streams", "held"}, jwtMembers...)
	type frame struct{ object, wantKey bool }
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF: decodeStrict's decoder has accepted the document
		}
		top := len(stack) - 1
		d, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (d == '}' || d == ']'):
			stack = stack[:top]
			if top > 0 && stack[top-1].object {
				stack[top-1].wantKey = true
			}
		case top >= 0 && stack[top].wantKey:
			name, _ := tok.(string)
			if !slices.Contains(known, name) && slices.ContainsFunc(known, func(k string) bool { return strings.EqualFold(k, name) }) {
				return fmt.Errorf("not a valid auth file: member names are lower case: %q", name)
			}
			stack[top].wantKey = false
		case isDelim:
			stack = append(stack, frame{object: d == '{', wantKey: d == '{'})
		case top >= 0 && stack[top].object:
			stack[top].wantKey = true
		}
	}
}

// checkPrincipal checks one principal of the file; jwtNamed: its name starts with the "jwt"
// member's principal_prefix, so it may be as long as JWT principals' names and have no keys.
func checkPrincipal(pf principalFormat, jwtNamed bool) (*Principal, [][sha256.Size]byte, error) {
	maxLen := 64
	if jwtNamed {
		maxLen = maxJWTPrincipalLen
	}
	if err := checkPrincipalName(pf.Name, maxLen); err != nil {
		return nil, nil, err
	}
	for _, s := range pf.CertificateSubjects {
		if s == "" || len(s) > 1024 {
			return nil, nil, fmt.Errorf(`certificate subject %q must be 1-1024 characters, as Go's pkix.Name.String() renders it (e.g. "CN=worker-1,O=acme")`, abbreviate(s))
		}
	}
	if len(pf.Keys) == 0 && len(pf.CertificateSubjects) == 0 && !jwtNamed {
		return nil, nil, errors.New(`"keys" is empty: give at least one "sha256:<hex>" (leasegate auth-key prints one), or "certificate_subjects"`)
	}
	hashes := make([][sha256.Size]byte, 0, len(pf.Keys))
	for _, k := range pf.Keys {
		h, err := parseKeyHash(k)
		if err != nil {
			return nil, nil, err
		}
		hashes = append(hashes, h)
	}
	if err := pf.Quotas.check(); err != nil {
		return nil, nil, err
	}
	p := &Principal{Name: pf.Name, Prefixes: pf.Prefixes, Permissions: pf.Permissions, Quotas: pf.Quotas}
	if len(pf.Prefixes) == 0 {
		return nil, nil, errors.New(`"prefixes" is empty: give the lock-name prefixes it may use, or "*" for all`)
	}
	for _, prefix := range pf.Prefixes {
		if prefix == AllNames {
			p.all = true
			continue
		}
		if err := checkPrefix(prefix); err != nil {
			return nil, nil, err
		}
	}
	if len(pf.Permissions) == 0 {
		return nil, nil, errors.New(`"permissions" is empty: give some of "lock", "inspect", "admin"`)
	}
	for _, perm := range pf.Permissions {
		b := p.bit(perm)
		if b == 0 {
			return nil, nil, fmt.Errorf(`permission %q is not one of "lock", "inspect", "admin"`, perm)
		}
		p.perms |= b
	}
	return p, hashes, nil
}

// keyPlaceholder starts the keys of the example auth file (deploy/auth.example.json), which
// parseKeyHash refuses: an example must not be loadable as it is.
const keyPlaceholder = "sha256:REPLACE"

// guessableKeys are keys nobody should be let in with: the empty key, words an example or a test
// would use, and the keys of earlier example auth files (sha256 of foo, bar, baz, and one more).
var guessableKeys = func() map[[sha256.Size]byte]bool {
	m := map[[sha256.Size]byte]bool{}
	for _, k := range []string{"", "foo", "bar", "baz", "qux", "test", "password", "secret", "admin", "changeme", "example", "key", "apikey"} {
		m[sha256.Sum256([]byte(k))] = true
	}
	for _, h := range []string{"6a5857265b01b8081e84feab0a3ac87ec405d1aa2259b2f962a0e385006d6750"} {
		var b [sha256.Size]byte
		if _, err := hex.Decode(b[:], []byte(h)); err == nil {
			m[b] = true
		}
	}
	return m
}()

// parseKeyHash reads "sha256:<64 lower-case hex digits>", refusing placeholders and the hashes of
// guessable keys.
func parseKeyHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	if strings.HasPrefix(s, keyPlaceholder) {
		return h, fmt.Errorf(`key %q is a placeholder: make a key with "leasegate auth-key" and put the "sha256:..." line it prints here`, abbreviate(s))
	}
	hexDigits, ok := strings.CutPrefix(s, keyHashPrefix)
	if ok && len(hexDigits) == 2*sha256.Size && strings.ToLower(hexDigits) == hexDigits {
		if _, err := hex.Decode(h[:], []byte(hexDigits)); err == nil {
			if guessableKeys[h] {
				return h, fmt.Errorf(`key %q is the hash of an empty or guessable key (an example's): make a key with "leasegate auth-key"`, abbreviate(s))
			}
			return h, nil
		}
	}
	return h, fmt.Errorf(`key %q is not "sha256:" and 64 lower-case hex digits (keys are stored as hashes, never in clear: leasegate auth-key prints one)`, abbreviate(s))
}

// abbreviate keeps an error from quoting a whole key someone pasted in clear.
func abbreviate(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// checkPrincipalName accepts 1-maxLen characters of A-Z a-z 0-9 . _ : @ -: names go into logs and
// tokens as they are.
func checkPrincipalName(name string, maxLen int) error {
	if name == "" || len(name) > maxLen || strings.IndexFunc(name, func(r rune) bool { return !nameChar(r) && r != '@' }) >= 0 {
		return fmt.Errorf(`"name" %q must be 1-%d characters of A-Z a-z 0-9 . _ : @ -`, name, maxLen)
	}
	return nil
}

// checkPrefix accepts what can start a lock name: 1-200 characters of A-Z a-z 0-9 . _ : -.
func checkPrefix(prefix string) error {
	if prefix == "" || len(prefix) > 200 || strings.IndexFunc(prefix, func(r rune) bool { return !nameChar(r) }) >= 0 {
		return fmt.Errorf(`prefix %q must be "*" or 1-200 characters of A-Z a-z 0-9 . _ : - (what lock names are made of)`, prefix)
	}
	return nil
}

func nameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == ':' || r == '-'
}
