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
	"strconv"
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
	macs sync.Pool // of *macState: HMAC-SHA256 keyed by the secret, reset before each use
}

// NewTokens returns a codec keyed by secret, which must not be empty.
func NewTokens(secret []byte) (*Tokens, error) {
	if len(secret) == 0 {
		return nil, fmt.Errorf("%w: empty token secret", ErrInvalid)
	}
	key := append([]byte(nil), secret...)
	t := &Tokens{}
	t.macs.New = func() any { return &macState{mac: hmac.New(sha256.New, key)} }
	return t, nil
}

// Mint returns the token for l.
func (t *Tokens) Mint(l Lease) string {
	return t.seal(leaseDomains[l.Kind], appendPayload(make([]byte, 0, 128), l))
}

// appendPayload appends l's payload as json.Marshal writes a tokenPayload of version 1 (the
// format tokens have always had; TestTokenMatchesDocumentedFormat): written by hand, since
// encoding/json's reflection took about 2 µs of every acquire (go test ./lockcore -bench Tokens).
func appendPayload(b []byte, l Lease) []byte {
	b = append(b, `{"v":1,"lock":`...)
	b = appendJSONString(b, l.Lock)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, l.Owner)
	b = append(b, `,"lease":`...)
	b = appendJSONString(b, l.ID)
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, l.Fence, 10)
	if l.Principal != "" {
		b = append(b, `,"principal":`...)
		b = appendJSONString(b, l.Principal)
	}
	return append(b, '}')
}

// appendJSONString appends s quoted as json.Marshal quotes it: as it is when it holds only
// printable ASCII that JSON and json.Marshal's HTML escaping leave alone, else by json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // cannot fail for a string
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// readPayload reads a payload appendPayload wrote. It reads the fields at the places appendPayload
// puts them and then writes them back: ok only when that gives raw again, so that a payload it
// reads means what json.Unmarshal would read in it. Parse decodes any other payload (one with
// escapes, or written otherwise) with encoding/json.
func readPayload(raw []byte) (l Lease, ok bool) {
	rest, ok := strings.CutPrefix(string(raw), `{"v":1,"lock":"`) // the lease's strings share this one
	field := func(next string) (v string) {
		if ok {
			v, rest, ok = strings.Cut(rest, next)
		}
		return v
	}
	l.Lock = field(`","owner":"`)
	l.Owner = field(`","lease":"`)
	l.ID = field(`","fence":`)
	fence, ok := strings.CutSuffix(rest, "}")
	if !ok {
		return Lease{}, false
	}
	fence, principal, hasPrincipal := strings.Cut(fence, `,"principal":"`)
	if hasPrincipal {
		if l.Principal, ok = strings.CutSuffix(principal, `"`); !ok {
			return Lease{}, false
		}
	}
	var err error
	if l.Fence, err = strconv.ParseInt(fence, 10, 64); err != nil {
		return Lease{}, false
	}
	var again [256]byte
	if !bytes.Equal(appendPayload(again[:0], l), raw) {
		return Lease{}, false
	}
	return l, true
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
	l, ok := readPayload(raw)
	if !ok {
		var tp tokenPayload
		if err := json.Unmarshal(raw, &tp); err != nil || tp.V != 1 {
			return Lease{}, fmt.Errorf("%w: payload is not a version 1 lease", ErrInvalidToken)
		}
		l = tp.Lease
	}
	if _, err := uuid.Parse(l.ID); err != nil || l.Fence <= 0 {
		return Lease{}, fmt.Errorf("%w: payload is not a version 1 lease", ErrInvalidToken)
	}
	if l.Lock != ref.Name {
		return Lease{}, fmt.Errorf("%w: minted for %s %q, not %q", ErrInvalidToken, ref.Kind, l.Lock, ref.Name)
	}
	l.Kind = ref.Kind
	return l, nil
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

// macState is a pooled HMAC-SHA256 keyed by the secret, with room to put a domain and a payload
// together: hash.Hash takes no strings, and converting one would allocate on every call.
type macState struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// sign appends to dst the HMAC of domain + payload. The keyed HMACs are pooled: keying one costs
// two SHA-256 blocks and four allocations, which every acquire and release would otherwise pay.
func sign[P string | []byte](t *Tokens, dst []byte, domain string, payload P) []byte {
	m := t.macs.Get().(*macState)
	defer t.macs.Put(m)
	m.mac.Reset()
	m.in = append(append(m.in[:0], domain...), payload...)
	_, _ = m.mac.Write(m.in)
	// Summed into the pooled state's room and copied: dst, given to the hash.Hash, would escape.
	return append(dst, m.mac.Sum(m.sum[:0])...)
}

// seal returns payload signed in domain: base64url(payload) "." base64url(HMAC-SHA256(domain +
// base64url(payload))), built in one buffer.
func (t *Tokens) seal(domain string, payload []byte) string {
	n := b64.EncodedLen(len(payload))
	out := make([]byte, n, n+1+b64.EncodedLen(sha256.Size))
	b64.Encode(out, payload)
	var mac [sha256.Size]byte
	out = b64.AppendEncode(append(out, '.'), sign(t, mac[:0], domain, out[:n]))
	return string(out)
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
	var want [sha256.Size]byte
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, sign(t, want[:0], domain, p)) {
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
