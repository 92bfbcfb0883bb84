package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The auth file (LEASEGATE_AUTH_FILE) is JSON (docs/auth.md; deploy/auth.example.json):
//
//	{"principals": [{"name": "billing", "keys": ["sha256:<64 hex>"],
//	                 "prefixes": ["billing.", "shared.reports."], "permissions": ["lock", "inspect"]}]}
//
// Member names match exactly and unknown members are errors, so that a typo never loosens the
// file. "jwt" (top level) and "certificate_subjects" (per principal) are reserved for JWTs and
// client-certificate subjects: a file that sets them is refused until the gateway supports them.

// fileFormat is the auth file as written.
type fileFormat struct {
	Principals []principalFormat `json:"principals"`
	JWT        json.RawMessage   `json:"jwt,omitempty"`
}

type principalFormat struct {
	Name                string          `json:"name"`
	Keys                []string        `json:"keys"`
	Prefixes            []string        `json:"prefixes"`
	Permissions         []Permission    `json:"permissions"`
	CertificateSubjects json.RawMessage `json:"certificate_subjects,omitempty"`
}

// keyHashPrefix starts every stored key hash.
const keyHashPrefix = "sha256:"

// Config is a loaded auth file: its principals, found by the SHA-256 of their API keys. A Config
// is never changed once built, so it is safe for concurrent use.
type Config struct {
	Principals []*Principal
	byKey      map[[sha256.Size]byte]*Principal
}

// maxKeyLen bounds what Authenticate hashes: generated keys are 46 bytes.
const maxKeyLen = 512

// Authenticate returns the principal whose stored hashes hold the SHA-256 of key, or
// ErrUnauthenticated. Keys are 256-bit random values, so one fast hash suffices: nobody can search
// that space, whatever the hash's speed; and comparing digests by map lookup leaks at most which
// digests are near, which says nothing of any key.
func (c *Config) Authenticate(key string) (*Principal, error) {
	if key == "" || len(key) > maxKeyLen {
		return nil, ErrUnauthenticated
	}
	if p, ok := c.byKey[sha256.Sum256([]byte(key))]; ok {
		return p, nil
	}
	return nil, ErrUnauthenticated
}

// Parse reads an auth file's contents and checks every principal, naming the first problem of
// each in its error.
func Parse(data []byte) (*Config, error) {
	var f fileFormat
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	if len(f.JWT) > 0 {
		return nil, errors.New(`"jwt" is reserved for JWT authentication, which this version does not support`)
	}
	if len(f.Principals) == 0 {
		return nil, errors.New(`"principals" is empty or missing: nobody could call the gateway`)
	}
	c := &Config{byKey: map[[sha256.Size]byte]*Principal{}}
	names := map[string]bool{}
	var errs []error
	for i, pf := range f.Principals {
		p, hashes, err := checkPrincipal(pf)
		if err == nil && names[p.Name] {
			err = fmt.Errorf("name %q is given twice", p.Name)
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
	known := []string{"principals", "jwt", "name", "keys", "prefixes", "permissions", "certificate_subjects"}
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

func checkPrincipal(pf principalFormat) (*Principal, [][sha256.Size]byte, error) {
	if err := checkPrincipalName(pf.Name); err != nil {
		return nil, nil, err
	}
	if len(pf.CertificateSubjects) > 0 {
		return nil, nil, errors.New(`"certificate_subjects" is reserved for client-certificate principals, which this version does not support`)
	}
	if len(pf.Keys) == 0 {
		return nil, nil, errors.New(`"keys" is empty: give at least one "sha256:<hex>" (leasegate auth-key prints one)`)
	}
	hashes := make([][sha256.Size]byte, 0, len(pf.Keys))
	for _, k := range pf.Keys {
		h, err := parseKeyHash(k)
		if err != nil {
			return nil, nil, err
		}
		hashes = append(hashes, h)
	}
	p := &Principal{Name: pf.Name, Prefixes: pf.Prefixes, Permissions: pf.Permissions}
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

// parseKeyHash reads "sha256:<64 lower-case hex digits>".
func parseKeyHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	hexDigits, ok := strings.CutPrefix(s, keyHashPrefix)
	if ok && len(hexDigits) == 2*sha256.Size && strings.ToLower(hexDigits) == hexDigits {
		if _, err := hex.Decode(h[:], []byte(hexDigits)); err == nil {
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

// checkPrincipalName accepts 1-64 characters of A-Z a-z 0-9 . _ : @ -: names go into logs and
// tokens as they are.
func checkPrincipalName(name string) error {
	if name == "" || len(name) > 64 || strings.IndexFunc(name, func(r rune) bool { return !nameChar(r) && r != '@' }) >= 0 {
		return fmt.Errorf(`"name" %q must be 1-64 characters of A-Z a-z 0-9 . _ : @ -`, name)
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
