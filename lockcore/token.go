package lockcore

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// tokenPayload is the decoded first half of a token. V versions the format.
type tokenPayload struct {
	V int `json:"v"`
	Lease
}

// b64 decodes strictly, so that each token has exactly one spelling.
var b64 = base64.RawURLEncoding.Strict()

// maxTokenLen bounds what Parse will decode: name 200 + owner 128 (up to 4 bytes a rune), in base64.
const maxTokenLen = 2048

// Tokens mints and verifies lease tokens: base64url(JSON payload) "." base64url(HMAC-SHA256).
// Anyone can decode the payload; only holders of the secret can mint one. Safe for concurrent use.
type Tokens struct {
	macs sync.Pool // of hash.Hash: HMAC-SHA256 keyed by the secret, reset before each use
}

// NewTokens returns a codec keyed by secret, which must not be empty.
func NewTokens(secret []byte) (*Tokens, error) {
	if len(secret) == 0 {
		return nil, fmt.Errorf("%w: empty token secret", ErrInvalid)
	}
	key := append([]byte(nil), secret...)
	t := &Tokens{}
	t.macs.New = func() any { return hmac.New(sha256.New, key) }
	return t, nil
}

// Mint returns the token for l.
func (t *Tokens) Mint(l Lease) string {
	payload, _ := json.Marshal(tokenPayload{V: 1, Lease: l}) // cannot fail: strings and ints only
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + base64.RawURLEncoding.EncodeToString(t.sign(leaseDomains[l.Kind], p))
}

// Parse verifies token in constant time and returns its lease. It returns ErrInvalidToken when
// the token is malformed, its signature does not match, or it was minted for anything but ref.
func (t *Tokens) Parse(token string, ref Ref) (Lease, error) {
	if token == "" {
		return Lease{}, fmt.Errorf("%w: missing", ErrInvalidToken)
	}
	if len(token) > maxTokenLen {
		return Lease{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidToken, maxTokenLen)
	}
	raw, err := t.verify(leaseDomains[ref.Kind], token)
	if err != nil {
		for _, other := range kinds {
			if _, e := t.verify(leaseDomains[other], token); other != ref.Kind && e == nil {
				return Lease{}, fmt.Errorf("%w: %s's token, not %s's", ErrInvalidToken, other.withArticle(), ref.Kind.withArticle())
			}
		}
		if _, e := t.verify(multiDomain, token); e == nil {
			return Lease{}, fmt.Errorf("%w: a multi-lock's token, not %s's: use it on /multilocks", ErrInvalidToken, ref.Kind.withArticle())
		}
		return Lease{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	var tp tokenPayload
	if err := json.Unmarshal(raw, &tp); err != nil || tp.V != 1 {
		return Lease{}, fmt.Errorf("%w: payload is not a version 1 lease", ErrInvalidToken)
	}
	if _, err := uuid.Parse(tp.ID); err != nil || tp.Fence <= 0 {
		return Lease{}, fmt.Errorf("%w: payload is not a version 1 lease", ErrInvalidToken)
	}
	if tp.Lock != ref.Name {
		return Lease{}, fmt.Errorf("%w: minted for %s %q, not %q", ErrInvalidToken, ref.Kind, tp.Lock, ref.Name)
	}
	tp.Kind = ref.Kind
	return tp.Lease, nil
}

// TokenClaims is what a lease token (a lock's, a semaphore's or a multi-lock's) says of itself.
type TokenClaims struct {
	Principal string   `json:"principal"`
	Locks     []string `json:"locks"` // a multi-lock token's members
}

// ReadClaims decodes token's payload WITHOUT verifying its signature: it is for checks that come
// before lockcore's (the handlers compare the principal with the caller's), never for trusting
// the token, which every Service method taking one verifies. ok is false when the payload is not
// base64url of a JSON object.
//
// A lock's or a semaphore's token is read by a scan rather than encoding/json (1 µs and 7
// allocations per request with a token, on the lock path): in the payload Mint wrote, a quote
// preceded by a comma is never inside a string (json.Marshal escapes quotes in strings), so
// `,"principal":"` is the member. A payload Mint did not write can make the scan read anything,
// which does not matter: its signature then fails lockcore's check. Multi-lock tokens, and
// principals written with escapes, go through encoding/json.
func ReadClaims(token string) (c TokenClaims, ok bool) {
	p, _, found := strings.Cut(token, ".")
	if !found || len(token) > maxMultiTokenLen {
		return TokenClaims{}, false
	}
	raw, err := b64.DecodeString(p)
	if err != nil || len(raw) < 2 || raw[0] != '{' {
		return TokenClaims{}, false
	}
	if !bytes.Contains(raw, []byte(`"locks":`)) {
		const key = `,"principal":"`
		i := bytes.Index(raw, []byte(key))
		if i < 0 {
			return TokenClaims{}, true
		}
		v := raw[i+len(key):]
		if end := bytes.IndexByte(v, '"'); end >= 0 && bytes.IndexByte(v[:end], '\\') < 0 {
			return TokenClaims{Principal: string(v[:end])}, true
		}
	}
	if json.Unmarshal(raw, &c) != nil {
		return TokenClaims{}, false
	}
	return c, true
}

// Signing domains keep one kind of signed value from passing for another: a lock's lease token's
// signature covers its payload alone (the original format), a semaphore's, an election's and a
// queue ticket's a prefix too.
var leaseDomains = [...]string{KindLock: "", KindSemaphore: "semaphore.", KindElection: "election."}

const (
	ticketDomain = "queue-ticket."
	multiDomain  = "multilock."
)

// sign returns the HMAC of domain + payload. The keyed HMACs are pooled: keying one costs two
// SHA-256 blocks and four allocations, which every acquire and release would otherwise pay.
func (t *Tokens) sign(domain, payload string) []byte {
	m := t.macs.Get().(hash.Hash)
	defer t.macs.Put(m)
	m.Reset()
	_, _ = io.WriteString(m, domain)
	_, _ = io.WriteString(m, payload)
	return m.Sum(nil)
}

// verify checks a "payload.signature" value signed in domain and returns its decoded payload.
func (t *Tokens) verify(domain, value string) ([]byte, error) {
	p, sig, ok := strings.Cut(value, ".")
	if !ok {
		return nil, errors.New("not of the form payload.signature")
	}
	if strings.ContainsAny(sig, "\r\n") { // base64 decoding skips them: one token, one spelling
		return nil, errors.New("signature is not base64url")
	}
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, t.sign(domain, p)) {
		return nil, errors.New("signature does not match (signed with another secret, or altered)")
	}
	raw, err := b64.DecodeString(p)
	if err != nil {
		return nil, errors.New("payload is not base64url")
	}
	return raw, nil
}

// maxMultiTokenLen bounds what ParseMulti will decode: 64 names of 200 bytes, an owner, in base64.
const maxMultiTokenLen = 24 << 10
