package lockcore_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

const (
	testSecret  = "token-test-secret-0123456789"
	otherSecret = "another-secret-0123456789abcdef"
	testLeaseID = "3f2b8c1e-5d4a-4e6f-9a7b-1c2d3e4f5a6b"
)

var testLease = lockcore.Lease{Lock: "orders.42", Owner: "billing-worker-7", ID: testLeaseID, Fence: 17}

func newTokens(t testing.TB, secret string) *lockcore.Tokens {
	t.Helper()
	tokens, err := lockcore.NewTokens([]byte(secret))
	require.NoError(t, err)
	return tokens
}

// signed builds a token from a raw JSON payload the way the documented format says:
// base64url(payload) "." base64url(HMAC-SHA256(secret, base64url(payload))).
func signed(secret, payload string) string {
	p := base64.RawURLEncoding.EncodeToString([]byte(payload))
	return p + "." + sign(secret, p)
}

func sign(secret, p string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(p))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Token surgery helpers (see also harness.AlterSignature and harness.NoncanonicalSignature).

// replacePayload swaps in payload and keeps token's signature.
func replacePayload(token, payload string) string {
	_, sig, _ := strings.Cut(token, ".")
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + sig
}

func TestTokenRoundTrip(t *testing.T) {
	tokens := newTokens(t, testSecret)
	for _, tc := range []struct {
		name  string
		lease lockcore.Lease
	}{
		{"plain", testLease},
		{"unicode owner", lockcore.Lease{Lock: "a", Owner: "Jürgen 😀", ID: testLeaseID, Fence: 1}},
		{"owner with JSON and HTML characters", lockcore.Lease{Lock: "a", Owner: `"quoted" <b>&\`, ID: testLeaseID, Fence: 2}},
		// The longest valid lease: 200-byte name, 128 characters that JSON escapes to 6 bytes each.
		{"largest valid lease", lockcore.Lease{Lock: strings.Repeat("n", 200), Owner: strings.Repeat("<", 128), ID: testLeaseID, Fence: math.MaxInt64}},
		{"largest valid lease, 4-byte characters", lockcore.Lease{Lock: strings.Repeat("n", 200), Owner: strings.Repeat("😀", 128), ID: testLeaseID, Fence: math.MaxInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token := tokens.Mint(tc.lease)
			assert.Regexp(t, `^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`, token, "base64url payload.signature")
			assert.Equal(t, token, tokens.Mint(tc.lease), "minting is deterministic")

			got, err := tokens.Parse(token, lockcore.LockRef(tc.lease.Lock))
			require.NoError(t, err)
			assert.Equal(t, tc.lease, got)

			other, err := newTokens(t, testSecret).Parse(token, lockcore.LockRef(tc.lease.Lock))
			require.NoError(t, err, "any codec with the same secret accepts the token")
			assert.Equal(t, tc.lease, other)
		})
	}
}

func TestTokenMatchesDocumentedFormat(t *testing.T) {
	tokens := newTokens(t, testSecret)
	token := signed(testSecret, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17}`)
	assert.Equal(t, tokens.Mint(testLease), token)
	got, err := tokens.Parse(token, lockcore.LockRef("orders.42"))
	require.NoError(t, err)
	assert.Equal(t, testLease, got)
}

func TestTokenParseRejects(t *testing.T) {
	tokens := newTokens(t, testSecret)
	valid := tokens.Mint(testLease)
	payload, sig, _ := strings.Cut(valid, ".")
	mint := func(l lockcore.Lease) string { return tokens.Mint(l) }
	with := func(change func(*lockcore.Lease)) lockcore.Lease {
		l := testLease
		change(&l)
		return l
	}

	for _, tc := range []struct {
		name  string
		token string
		lock  string // default testLease.Lock
	}{
		{name: "empty", token: ""},
		{name: "no dot", token: payload + sig},
		{name: "only a dot", token: "."},
		{name: "empty signature", token: payload + "."},
		{name: "empty payload", token: "." + sig},
		{name: "signature not base64", token: payload + ".!!!"},
		{name: "signature with padding", token: valid + "="},
		{name: "second dot", token: valid + ".x"},
		{name: "leading space", token: " " + valid},
		{name: "signature altered", token: harness.AlterSignature(valid)},
		{name: "signature truncated", token: valid[:len(valid)-1]},
		{name: "signature extended", token: valid + "A"},
		{name: "signature with non-canonical trailing bits", token: harness.NoncanonicalSignature(valid)},
		{name: "payload altered: lease", token: replacePayload(valid, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"00000000-0000-4000-8000-000000000000","fence":17}`)},
		{name: "payload altered: fence", token: replacePayload(valid, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":18}`)},
		{name: "payload altered: owner", token: replacePayload(valid, `{"v":1,"lock":"orders.42","owner":"mallory","lease":"`+testLeaseID+`","fence":17}`)},
		{name: "payload altered: lock", token: replacePayload(valid, `{"v":1,"lock":"other","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17}`), lock: "other"},
		{name: "other secret", token: newTokens(t, otherSecret).Mint(testLease)},
		{name: "other lock name", token: valid, lock: "orders.43"},
		{name: "other lock name, prefix", token: valid, lock: "orders.4"},
		{name: "other lock name, empty", token: valid, lock: " "},
		{name: "non-UUID lease", token: mint(with(func(l *lockcore.Lease) { l.ID = "not-a-uuid" }))},
		{name: "empty lease", token: mint(with(func(l *lockcore.Lease) { l.ID = "" }))},
		{name: "fence 0", token: mint(with(func(l *lockcore.Lease) { l.Fence = 0 }))},
		{name: "fence negative", token: mint(with(func(l *lockcore.Lease) { l.Fence = -1 }))},
		{name: "v 0", token: signed(testSecret, `{"v":0,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17}`)},
		{name: "v 2", token: signed(testSecret, `{"v":2,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17}`)},
		{name: "v missing", token: signed(testSecret, `{"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17}`)},
		{name: "v a string", token: signed(testSecret, `{"v":"1","lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17}`)},
		{name: "fence a string", token: signed(testSecret, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":"17"}`)},
		{name: "payload not JSON", token: signed(testSecret, `hello`)},
		{name: "payload JSON null", token: signed(testSecret, `null`)},
		{name: "payload with trailing data", token: signed(testSecret, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17} {}`)},
		{name: "payload not base64", token: "!!!." + sign(testSecret, "!!!")},
		{name: "over-long", token: mint(with(func(l *lockcore.Lease) { l.Owner = strings.Repeat("o", 2000) }))},
		{name: "over-long garbage", token: strings.Repeat("A", 1<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lock := tc.lock
			if lock == "" {
				lock = testLease.Lock
			}
			l, err := tokens.Parse(tc.token, lockcore.LockRef(lock))
			assert.ErrorIs(t, err, lockcore.ErrInvalidToken)
			assert.Zero(t, l, "no lease on failure")
		})
	}
}

func TestNewTokens(t *testing.T) {
	for _, secret := range [][]byte{nil, {}} {
		tokens, err := lockcore.NewTokens(secret)
		assert.ErrorIs(t, err, lockcore.ErrInvalid)
		assert.Nil(t, tokens)
	}

	secret := []byte(testSecret)
	tokens, err := lockcore.NewTokens(secret)
	require.NoError(t, err)
	token := tokens.Mint(testLease)
	secret[0] ^= 0xff // the codec keeps its own copy
	_, err = tokens.Parse(token, lockcore.LockRef(testLease.Lock))
	assert.NoError(t, err)
	assert.Equal(t, token, tokens.Mint(testLease))
}

// FuzzParse: Parse never panics, fails only with ErrInvalidToken, and accepts a token only if it
// is exactly the token it would mint for the lease it returns, for the lock asked about.
func FuzzParse(f *testing.F) {
	tokens := newTokens(f, testSecret)
	valid := tokens.Mint(testLease)
	payload, sig, _ := strings.Cut(valid, ".")
	for _, seed := range []string{
		valid,
		"",
		".",
		payload,
		payload + ".",
		"." + sig,
		harness.AlterSignature(valid),
		harness.NoncanonicalSignature(valid),
		valid[:len(valid)-1],
		valid + "=",
		valid + ".x",
		replacePayload(valid, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":18}`),
		newTokens(f, otherSecret).Mint(testLease),
		signed(testSecret, `{"v":2,"lock":"orders.42","owner":"w","lease":"`+testLeaseID+`","fence":1}`),
		signed(testSecret, `{"v":1,"lock":"orders.42","owner":"w","lease":"x","fence":1}`),
		signed(testSecret, `{"v":1,"lock":"orders.42","owner":"w","lease":"`+testLeaseID+`","fence":0}`),
	} {
		f.Add(seed, testLease.Lock)
	}
	f.Add(valid, "orders.43")

	f.Fuzz(func(t *testing.T, token, lock string) {
		l, err := tokens.Parse(token, lockcore.LockRef(lock))
		if err != nil {
			if !errors.Is(err, lockcore.ErrInvalidToken) {
				t.Fatalf("Parse(%q) failed with %v, not ErrInvalidToken", token, err)
			}
			return
		}
		if l.Lock != lock {
			t.Fatalf("Parse(%q, %q) accepted a token for lock %q", token, lock, l.Lock)
		}
		if minted := tokens.Mint(l); token != minted {
			t.Fatalf("Parse accepted %q, which it did not mint: it mints %q for %+v", token, minted, l)
		}
	})
}

// A lease's principal is part of the signed payload, and absent from it without authentication,
// so that tokens keep their original form.
func TestTokenPrincipal(t *testing.T) {
	tokens := newTokens(t, testSecret)
	plain := tokens.Mint(testLease)
	p, _, _ := strings.Cut(plain, ".")
	raw, err := base64.RawURLEncoding.DecodeString(p)
	require.NoError(t, err)
	assert.Equal(t, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17}`, string(raw))

	owned := testLease
	owned.Principal = "billing"
	token := tokens.Mint(owned)
	got, err := tokens.Parse(token, lockcore.LockRef("orders.42"))
	require.NoError(t, err)
	assert.Equal(t, "billing", got.Principal)
	claims, ok := lockcore.ReadClaims(token)
	require.True(t, ok)
	assert.Equal(t, lockcore.TokenClaims{Principal: "billing"}, claims)

	// The principal is signed: changing it breaks the signature.
	forged := replacePayload(token, `{"v":1,"lock":"orders.42","owner":"billing-worker-7","lease":"`+testLeaseID+`","fence":17,"principal":"ops"}`)
	_, err = tokens.Parse(forged, lockcore.LockRef("orders.42"))
	assert.ErrorIs(t, err, lockcore.ErrInvalidToken)

	multi := tokens.MintMulti(lockcore.MultiLease{ID: "m-" + testLeaseID, Owner: "o", Locks: []string{"a", "b"},
		Mode: lockcore.Exclusive, Principal: "billing"})
	claims, ok = lockcore.ReadClaims(multi)
	require.True(t, ok)
	assert.Equal(t, lockcore.TokenClaims{Principal: "billing", Locks: []string{"a", "b"}}, claims)
	m, err := tokens.ParseMulti(multi, "")
	require.NoError(t, err)
	assert.Equal(t, "billing", m.Principal)

	for _, bad := range []string{"", "nodot", "!!!.sig", base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".sig"} {
		_, ok := lockcore.ReadClaims(bad)
		assert.False(t, ok, bad)
	}
}

// ReadClaims' scan agrees with encoding/json on what Mint writes, whatever the owner holds.
func TestReadClaimsScan(t *testing.T) {
	tokens := newTokens(t, testSecret)
	for _, owner := range []string{"w", `,"principal":"ops"`, `\",\"principal\":\"ops`, `"locks":["a"]`, "é\u2028"} {
		for _, principal := range []string{"", "billing", "a@b:c"} {
			l := testLease
			l.Owner, l.Principal = owner, principal
			claims, ok := lockcore.ReadClaims(tokens.Mint(l))
			require.True(t, ok)
			assert.Equal(t, principal, claims.Principal, "owner %q", owner)
		}
	}
}

// BenchmarkTokens is what an acquire+release cycle spends on its lease's token: one Mint, one
// Parse.
func BenchmarkTokens(b *testing.B) {
	tokens := newTokens(b, testSecret)
	ref := lockcore.LockRef(testLease.Lock)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tokens.Parse(tokens.Mint(testLease), ref); err != nil {
			b.Fatal(err)
		}
	}
}
