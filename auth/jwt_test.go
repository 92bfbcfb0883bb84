package auth_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/internal/harness"
)

// jwtFile writes key's JWKS (or PEM, when pemKey) beside an auth file whose "jwt" member is extra
// plus issuer "https://issuer.test" and audience "leasegate", and loads it.
func jwtFile(t *testing.T, key *harness.JWTKey, pemKey bool, extra string) (*auth.Config, error) {
	t.Helper()
	dir := t.TempDir()
	member := `"jwks_file":"jwks.json"`
	if pemKey {
		require.NoError(t, harness.WritePublicKeyPEM(filepath.Join(dir, "key.pem"), key))
		member = `"public_key_file":"key.pem"`
	} else {
		require.NoError(t, harness.WriteJWKS(filepath.Join(dir, "jwks.json"), key))
	}
	path := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"principals":[],"jwt":{`+member+`,"issuer":"https://issuer.test","audience":"leasegate"`+extra+`}}`), 0o600))
	return auth.Load(path)
}

func claims(mod func(map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{"iss": "https://issuer.test", "aud": "leasegate", "sub": "worker-1",
		"exp": now.Add(time.Minute).Unix(), "iat": now.Unix(),
		"leasegate_prefixes": []string{"billing."}, "leasegate_permissions": []string{"lock", "inspect"}}
	if mod != nil {
		mod(c)
	}
	return c
}

func TestJWTAuthenticates(t *testing.T) {
	key, err := harness.NewJWTKey("k1")
	require.NoError(t, err)
	other, err := harness.NewJWTKey("k1")
	require.NoError(t, err)
	for _, pemKey := range []bool{false, true} {
		c, err := jwtFile(t, key, pemKey, "")
		require.NoError(t, err)
		tok, err := key.Sign(claims(nil), !pemKey)
		require.NoError(t, err)
		p, err := c.Authenticate(tok)
		require.NoError(t, err, "pem %v", pemKey)
		assert.Equal(t, "jwt:worker-1", p.Name)
		assert.True(t, p.Has(auth.Lock))
		assert.False(t, p.Has(auth.Admin))
		assert.True(t, p.AllowsName("billing.x"))
		assert.False(t, p.AllowsName("orders.x"))

		now := time.Now()
		for name, tc := range map[string]struct {
			mod  func(map[string]any)
			key  *harness.JWTKey
			want string
		}{
			"expired":             {func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }, key, "expired"},
			"no exp":              {func(c map[string]any) { delete(c, "exp") }, key, "exp"},
			"not yet valid":       {func(c map[string]any) { c["nbf"] = now.Add(time.Minute).Unix() }, key, "not valid yet"},
			"wrong audience":      {func(c map[string]any) { c["aud"] = "other" }, key, "aud"},
			"wrong issuer":        {func(c map[string]any) { c["iss"] = "https://evil.test" }, key, "iss"},
			"another key":         {nil, other, "signature"},
			"bad principal":       {func(c map[string]any) { c["sub"] = "a b" }, key, `"sub" claim`},
			"no principal":        {func(c map[string]any) { delete(c, "sub") }, key, `"sub" claim`},
			"bad prefix":          {func(c map[string]any) { c["leasegate_prefixes"] = []string{"a/b"} }, key, "prefix"},
			"prefixes not string": {func(c map[string]any) { c["leasegate_prefixes"] = 3 }, key, "leasegate_prefixes"},
		} {
			tok, err := tc.key.Sign(claims(tc.mod), !pemKey)
			require.NoError(t, err)
			_, err = c.Authenticate(tok)
			require.ErrorIs(t, err, auth.ErrUnauthenticated, name)
			assert.Contains(t, err.Error(), tc.want, name)
		}
		// Within the leeway: expired 10 s ago still passes.
		tok, err = key.Sign(claims(func(c map[string]any) { c["exp"] = now.Add(-10 * time.Second).Unix() }), !pemKey)
		require.NoError(t, err)
		_, err = c.Authenticate(tok)
		assert.NoError(t, err)
	}

	// alg none, and HS256 keyed with the public key's bytes, are refused.
	c, err := jwtFile(t, key, false, "")
	require.NoError(t, err)
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims(claims(nil))).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	_, err = c.Authenticate(none)
	assert.ErrorIs(t, err, auth.ErrUnauthenticated)
	assert.Contains(t, err.Error(), "signing method none is invalid")
	hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims(nil))).SignedString([]byte("public"))
	require.NoError(t, err)
	_, err = c.Authenticate(hs)
	assert.ErrorIs(t, err, auth.ErrUnauthenticated)

	// Claim names and the principal prefix are configurable; a space-separated claim works; unknown
	// permissions are ignored.
	c, err = jwtFile(t, key, false, `,"principal_claim":"email","prefixes_claim":"ns","permissions_claim":"scope","principal_prefix":"oidc:"`)
	require.NoError(t, err)
	tok, err := key.Sign(claims(func(c map[string]any) {
		c["email"], c["ns"], c["scope"] = "ann@example.com", "a. b.", "openid admin lock"
	}), true)
	require.NoError(t, err)
	p, err := c.Authenticate(tok)
	require.NoError(t, err)
	assert.Equal(t, "oidc:ann@example.com", p.Name)
	assert.Equal(t, []string{"a.", "b."}, p.Prefixes)
	assert.Equal(t, []auth.Permission{auth.Admin, auth.Lock}, p.Permissions)

	// Without "jwt", a JWT is refused as such.
	_, h := auth.NewKey()
	plain, err := auth.Parse(file(principal("a", h, `"*"`, `"lock"`)))
	require.NoError(t, err)
	_, err = plain.Authenticate(tok)
	assert.ErrorContains(t, err, `configures no "jwt"`)
}

func TestJWTFileRefuses(t *testing.T) {
	key, err := harness.NewJWTKey("k1")
	require.NoError(t, err)
	for extra, want := range map[string]string{
		`,"algorithms":["none"]`:          `algorithm "none"`,
		`,"algorithms":["HS256"]`:         `algorithm "HS256"`,
		`,"public_key_file":"x.pem"`:      "exactly one",
		`,"principal_prefix":""`:          "principal_prefix",
		`,"leeway":"1m"`:                  "unknown field",
		`,"Issuer":"x"`:                   "lower case",
		`,"principal_prefix":"has space"`: "principal_prefix",
	} {
		_, err := jwtFile(t, key, false, extra)
		require.Error(t, err, extra)
		assert.Contains(t, err.Error(), want, extra)
	}
	_, err = auth.Parse([]byte(`{"principals":[],"jwt":{"jwks_file":"/nonexistent/jwks.json","issuer":"i","audience":"a"}}`))
	assert.ErrorContains(t, err, "jwks_file")
	_, err = auth.Parse([]byte(`{"principals":[],"jwt":{"jwks_file":"j","issuer":"i"}}`))
	assert.ErrorContains(t, err, `"audience"`)

	// A file principal may not take a name JWT principals have.
	dir := t.TempDir()
	require.NoError(t, harness.WriteJWKS(filepath.Join(dir, "jwks.json"), key))
	_, h := auth.NewKey()
	data := `{"principals":[` + principal("jwt:x", h, `"*"`, `"lock"`) + `],"jwt":{"jwks_file":"jwks.json","issuer":"i","audience":"a"}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.json"), []byte(data), 0o600))
	_, err = auth.Load(filepath.Join(dir, "auth.json"))
	assert.ErrorContains(t, err, "principal_prefix")
}

func TestCertificateSubjects(t *testing.T) {
	_, h := auth.NewKey()
	c, err := auth.Parse([]byte(`{"principals":[
		{"name":"worker","keys":[],"certificate_subjects":["CN=worker-1,O=acme","CN=worker-2"],"prefixes":["*"],"permissions":["lock"]},
		{"name":"both","keys":["` + h + `"],"certificate_subjects":["CN=both"],"prefixes":["*"],"permissions":["lock"]}]}`))
	require.NoError(t, err)
	for subject, want := range map[string]string{"CN=worker-1,O=acme": "worker", "CN=worker-2": "worker", "CN=both": "both"} {
		p, err := c.AuthenticateCertificate(subject)
		require.NoError(t, err)
		assert.Equal(t, want, p.Name)
	}
	for _, subject := range []string{"CN=worker-1", "O=acme,CN=worker-1", "cn=worker-2", ""} {
		_, err := c.AuthenticateCertificate(subject)
		assert.ErrorIs(t, err, auth.ErrUnauthenticated, subject)
	}
	for data, want := range map[string]string{
		`{"principals":[{"name":"a","certificate_subjects":["CN=a"],"prefixes":["*"],"permissions":["lock"]},{"name":"b","certificate_subjects":["CN=a"],"prefixes":["*"],"permissions":["lock"]}]}`: "a subject names one principal",
		`{"principals":[{"name":"a","certificate_subjects":[""],"prefixes":["*"],"permissions":["lock"]}]}`:                                                                                          "certificate subject",
		`{"principals":[{"name":"a","keys":[],"certificate_subjects":[],"prefixes":["*"],"permissions":["lock"]}]}`:                                                                                  `"keys" is empty`,
	} {
		_, err := auth.Parse([]byte(data))
		require.Error(t, err)
		assert.Contains(t, err.Error(), want)
	}
	assert.False(t, strings.Contains(h, " "))
}

// A file principal named like a JWT principal gives it its prefixes and permissions: the way to
// use Kubernetes service-account tokens, which carry no custom claims.
func TestJWTPrincipalFromFile(t *testing.T) {
	key, err := harness.NewJWTKey("k1")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, harness.WriteJWKS(filepath.Join(dir, "jwks.json"), key))
	sa := "system:serviceaccount:billing-prod:nightly-reconciler-with-a-rather-long-name"
	data := `{"principals":[{"name":"jwt:` + sa + `","prefixes":["billing."],"permissions":["lock","admin"]}],
		"jwt":{"jwks_file":"jwks.json","issuer":"https://issuer.test","audience":"leasegate"}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.json"), []byte(data), 0o600))
	c, err := auth.Load(filepath.Join(dir, "auth.json"))
	require.NoError(t, err)
	tok, err := key.Sign(claims(func(c map[string]any) {
		c["sub"] = sa
		c["leasegate_prefixes"] = []string{"*"} // ignored: the file's principal wins
		delete(c, "leasegate_permissions")
	}), true)
	require.NoError(t, err)
	p, err := c.Authenticate(tok)
	require.NoError(t, err)
	assert.Equal(t, "jwt:"+sa, p.Name)
	assert.True(t, p.Has(auth.Admin))
	assert.False(t, p.AllowsAll())
	assert.True(t, p.AllowsName("billing.x"))
}

// The JWKS is re-read when it changes, though the auth file does not.
func TestStoreReloadsJWKS(t *testing.T) {
	first, err := harness.NewJWTKey("k1")
	require.NoError(t, err)
	second, err := harness.NewJWTKey("k2")
	require.NoError(t, err)
	dir := t.TempDir()
	jwks := filepath.Join(dir, "jwks.json")
	require.NoError(t, harness.WriteJWKS(jwks, first))
	path := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"jwt":{"jwks_file":"jwks.json","issuer":"https://issuer.test","audience":"leasegate"}}`), 0o600))
	s, err := auth.Open(path, nil)
	require.NoError(t, err)
	tok1, err := first.Sign(claims(nil), true)
	require.NoError(t, err)
	tok2, err := second.Sign(claims(nil), true)
	require.NoError(t, err)
	_, err = s.Authenticate(tok1)
	require.NoError(t, err)
	_, err = s.Authenticate(tok2)
	require.Error(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, 5*time.Millisecond, nil) }()
	defer func() { cancel(); <-done }()
	require.NoError(t, harness.WriteJWKS(jwks, second))
	later := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(jwks, later, later))
	require.Eventually(t, func() bool { _, err := s.Authenticate(tok2); return err == nil }, 5*time.Second, 5*time.Millisecond)
	_, err = s.Authenticate(tok1)
	assert.ErrorIs(t, err, auth.ErrUnauthenticated)
}

// RS256 keys (Kubernetes' default) from a JWKS or a PEM file; an RS256 token is refused where
// "algorithms" does not list it.
func TestJWTRSA(t *testing.T) {
	key, err := harness.NewRSAJWTKey("r1")
	require.NoError(t, err)
	tok, err := key.Sign(claims(nil), true)
	require.NoError(t, err)
	for _, pemKey := range []bool{false, true} {
		c, err := jwtFile(t, key, pemKey, "")
		require.NoError(t, err)
		p, err := c.Authenticate(tok)
		require.NoError(t, err)
		assert.Equal(t, "jwt:worker-1", p.Name)
	}
	c, err := jwtFile(t, key, true, `,"algorithms":["ES256"]`)
	require.NoError(t, err)
	_, err = c.Authenticate(tok)
	assert.ErrorContains(t, err, "signing method RS256 is invalid")
}

// BenchmarkJWTVerify: a token's first use (signature verified) and its next ones (cached until
// its exp), ES256 and RS256:
//
//	go test ./auth -run '^$' -bench JWTVerify
func BenchmarkJWTVerify(b *testing.B) {
	for _, newKey := range []func(string) (*harness.JWTKey, error){harness.NewJWTKey, harness.NewRSAJWTKey} {
		key, err := newKey("k")
		require.NoError(b, err)
		dir := b.TempDir()
		require.NoError(b, harness.WriteJWKS(filepath.Join(dir, "jwks.json"), key))
		path := filepath.Join(dir, "auth.json")
		require.NoError(b, os.WriteFile(path, []byte(`{"jwt":{"jwks_file":"jwks.json","issuer":"https://issuer.test","audience":"leasegate","algorithms":["ES256","RS256"]}}`), 0o600))
		c, err := auth.Load(path)
		require.NoError(b, err)
		alg := "es256"
		if tok, _ := key.Sign(claims(nil), true); strings.Contains(tok, "eyJhbGciOiJSUzI1NiIs") {
			alg = "rs256"
		}
		b.Run(alg+"-first-use", func(b *testing.B) {
			toks := make([]string, b.N)
			for i := range toks {
				toks[i], err = key.Sign(claims(func(c map[string]any) { c["jti"] = alg + strconv.Itoa(i) }), true)
				require.NoError(b, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := c.Authenticate(toks[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg+"-cached", func(b *testing.B) {
			tok, err := key.Sign(claims(nil), true)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Authenticate(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
