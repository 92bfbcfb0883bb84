package security

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

const (
	jwtIssuer   = "https://issuer.leasegate.test"
	jwtAudience = "leasegate"
)

// jwtEnv is a gateway whose auth file has the API-key principals of testkit.Principals and a
// "jwt" member verifying tokens against the keys in jwks.json (or key.pem) beside it.
type jwtEnv struct {
	*authEnv
	dir string
	key *harness.JWTKey
}

func newJWTEnv(t *testing.T, pemKey bool) *jwtEnv {
	t.Helper()
	key, err := harness.NewJWTKey("first")
	require.NoError(t, err)
	ps := testkit.Principals()
	dir := t.TempDir()
	member := `"jwks_file": "jwks.json"`
	if pemKey {
		require.NoError(t, harness.WritePublicKeyPEM(filepath.Join(dir, "key.pem"), key))
		member = `"public_key_file": "key.pem"`
	} else {
		require.NoError(t, harness.WriteJWKS(filepath.Join(dir, "jwks.json"), key))
	}
	file := strings.TrimSuffix(strings.TrimSpace(string(testkit.AuthFile(ps))), "}") +
		fmt.Sprintf(`, "jwt": {%s, "issuer": %q, "audience": %q, "algorithms": ["ES256", "RS256"]}}`, member, jwtIssuer, jwtAudience)
	path := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(path, []byte(file), 0o600))
	e := &authEnv{Env: testkit.NewEnv(t, map[string]string{"LEASEGATE_AUTH_FILE": path}), path: path, principals: ps}
	return &jwtEnv{authEnv: e, dir: dir, key: key}
}

// jwtClaims are valid claims for subject sub with prefixes and permissions, changed by mod.
func jwtClaims(sub string, prefixes []string, perms []string, mod func(map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{"iss": jwtIssuer, "aud": []string{"other", jwtAudience}, "sub": sub,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"leasegate_prefixes": prefixes, "leasegate_permissions": perms}
	if mod != nil {
		mod(c)
	}
	return c
}

func bearer(token, leaseToken string) harness.Headers {
	h := harness.Headers{"Authorization": "Bearer " + token}
	if leaseToken != "" {
		h["Lease-Token"] = leaseToken
	}
	return h
}

// TestAuthJWT: JWTs accepted with their claims' prefixes and permissions, refused (401) when
// expired, not yet valid, for another audience or issuer, signed by another key or not at all;
// nothing refused reaches Redis; a JWT principal's lease token is its own.
func TestAuthJWT(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls on one Redis server")
	e := newJWTEnv(t, false)
	c := e.Client
	sign := func(k *harness.JWTKey, claims map[string]any) string {
		tok, err := k.Sign(claims, true)
		require.NoError(t, err)
		return tok
	}
	worker := sign(e.key, jwtClaims("system:serviceaccount:billing:worker", []string{"billing."}, []string{"lock", "inspect"}, nil))

	g := c.Do(http.MethodPost, "/locks/billing.jwt", bearer(worker, ""), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/locks/billing.jwt", bearer(worker, g.Str("token")), "").Status)

	other, err := harness.NewJWTKey("first") // same kid, another key
	require.NoError(t, err)
	now := time.Now()
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims(jwtClaims("x", []string{"*"}, []string{"lock"}, nil))).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	before := testkit.EvalCalls(t, e.Env)
	for _, tc := range []struct{ name, token, want string }{
		{"expired", sign(e.key, jwtClaims("w", []string{"*"}, []string{"lock"}, func(c map[string]any) { c["exp"] = now.Add(-2 * time.Minute).Unix() })), "token is expired"},
		{"not yet valid", sign(e.key, jwtClaims("w", []string{"*"}, []string{"lock"}, func(c map[string]any) { c["nbf"] = now.Add(2 * time.Minute).Unix() })), "token is not valid yet"},
		{"wrong audience", sign(e.key, jwtClaims("w", []string{"*"}, []string{"lock"}, func(c map[string]any) { c["aud"] = "someone-else" })), "aud"},
		{"wrong issuer", sign(e.key, jwtClaims("w", []string{"*"}, []string{"lock"}, func(c map[string]any) { c["iss"] = "https://evil.test" })), "iss"},
		{"another key", sign(other, jwtClaims("w", []string{"*"}, []string{"lock"}, nil)), "signature is invalid"},
		{"alg none", none, "signing method none is invalid"},
		{"garbage", "eyJhbGciOiJFUzI1NiJ9.e30.AAAA", "not accepted"},
	} {
		r := c.Do(http.MethodPost, "/locks/billing.jwt", bearer(tc.token, ""), testkit.AcquireBody("w", 60000))
		assertAuthProblem(t, r, http.StatusUnauthorized, testkit.ProbUnauthenticated, tc.want)
	}

	// Prefixes and permissions come from the claims.
	reader := sign(e.key, jwtClaims("reader", []string{"billing."}, []string{"inspect"}, nil))
	r := c.Do(http.MethodPost, "/locks/billing.other", bearer(reader, ""), testkit.AcquireBody("w", 60000))
	assertAuthProblem(t, r, http.StatusForbidden, probForbidden, `principal "jwt:reader" lacks the "lock" permission`)
	r = c.Do(http.MethodPost, "/locks/orders.1", bearer(worker, ""), testkit.AcquireBody("w", 60000))
	assertAuthProblem(t, r, http.StatusForbidden, probForbidden, `may not use the name "orders.1"`)
	assert.Equal(t, "orders.1", r.Str("name"))

	// Cross-principal: another JWT principal, and an API-key principal, with every permission.
	admin := sign(e.key, jwtClaims("admin", []string{"*"}, []string{"lock", "inspect", "admin"}, nil))
	for who, h := range map[string]harness.Headers{"jwt": bearer(admin, g.Str("token")), "api key": e.as("ops", g.Str("token"))} {
		r := c.Do(http.MethodDelete, "/locks/billing.jwt", h, "")
		assert.Equal(t, http.StatusForbidden, r.Status, "%s: %s", who, r.Body)
		assert.Contains(t, r.Str("detail"), `belongs to principal "jwt:system:serviceaccount:billing:worker"`, who)
	}
	assert.Equal(t, before, testkit.EvalCalls(t, e.Env), "a refused request ran a script")

	// Another token of the same principal (a refreshed one) may use the lease.
	refreshed := sign(e.key, jwtClaims("system:serviceaccount:billing:worker", []string{"billing."}, []string{"lock"},
		func(c map[string]any) { c["iat"] = now.Add(time.Second).Unix() }))
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/billing.jwt", bearer(refreshed, g.Str("token")), "").Status)
	// API keys still work beside JWTs.
	assert.Equal(t, http.StatusCreated, c.Do(http.MethodPost, "/locks/billing.key", e.as("billing", ""), testkit.AcquireBody("w", 1000)).Status)
	assert.NotContains(t, e.Gateway.Logs(), worker, "a JWT in the log")
}

// TestAuthJWTPEMAndReload: a PEM public key works as the JWKS does; a JWKS replaced in place (same
// size and time, so that only the signal can tell) is re-read on SIGHUP, and a lease taken before
// is still its principal's under the new key.
func TestAuthJWTPEMAndReload(t *testing.T) {
	t.Parallel()
	p := newJWTEnv(t, true)
	tok, err := p.key.Sign(jwtClaims("pem", []string{"pem."}, []string{"lock"}, nil), false)
	require.NoError(t, err)
	r := p.Client.Do(http.MethodPost, "/locks/pem.a", bearer(tok, ""), testkit.AcquireBody("w", 60000))
	assert.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	e := newJWTEnv(t, false)
	c := e.Client
	jwks := filepath.Join(e.dir, "jwks.json")
	fi, err := os.Stat(jwks)
	require.NoError(t, err)
	old, err := e.key.Sign(jwtClaims("svc", []string{"svc."}, []string{"lock"}, nil), true)
	require.NoError(t, err)
	g := c.Do(http.MethodPost, "/locks/svc.a", bearer(old, ""), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)

	next, err := harness.NewJWTKey("other") // the same length of kid: the same size of file
	require.NoError(t, err)
	require.NoError(t, harness.WriteJWKS(jwks, next))
	require.NoError(t, os.Chtimes(jwks, fi.ModTime(), fi.ModTime()))
	if fi2, err := os.Stat(jwks); err == nil && fi2.Size() != fi.Size() {
		t.Logf("the JWKS changed size (%d -> %d): polling may pick it up before the signal", fi.Size(), fi2.Size())
	}
	fresh, err := next.Sign(jwtClaims("svc", []string{"svc."}, []string{"lock"}, nil), true)
	require.NoError(t, err)
	require.NoError(t, e.Gateway.Hangup())
	harness.Eventually(t, 5*time.Second, "the new key after SIGHUP", func() bool {
		return c.Do(http.MethodGet, "/locks/svc.a", bearer(fresh, ""), "").Status == http.StatusForbidden // lock but no inspect: authenticated
	})
	assertAuthProblem(t, c.Do(http.MethodGet, "/locks/svc.a", bearer(old, ""), ""), http.StatusUnauthorized, testkit.ProbUnauthenticated, "not accepted")
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/svc.a", bearer(fresh, g.Str("token")), "").Status)

	// A broken JWKS keeps the last good one.
	require.NoError(t, os.WriteFile(jwks, []byte(`{"keys": []}`), 0o600))
	require.NoError(t, e.Gateway.Hangup())
	harness.Eventually(t, 5*time.Second, "the reload failure in the log", func() bool {
		return strings.Contains(e.Gateway.Logs(), "auth file reload failed")
	})
	assert.Equal(t, http.StatusCreated, c.Do(http.MethodPost, "/locks/svc.b", bearer(fresh, ""), testkit.AcquireBody("w", 1000)).Status)
}

// TestAuthClientCertificate: over HTTPS with LEASEGATE_TLS_CLIENT_CA_FILE, the principal whose
// certificate_subjects hold the client certificate's subject is served without a bearer; a
// certificate no principal lists is 401 without one; a bearer takes precedence.
func TestAuthClientCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, pair, err := harness.WriteServerCertificates(dir)
	require.NoError(t, err)
	mapped, err := ca.Issue(dir, "worker", "worker-1")
	require.NoError(t, err)
	unmapped, err := ca.Issue(dir, "stranger", "stranger")
	require.NoError(t, err)
	ps := testkit.Principals()
	file := strings.Replace(string(testkit.AuthFile(ps)), `{"principals":[`,
		`{"principals":[{"name":"worker","certificate_subjects":["CN=worker-1"],"prefixes":["jobs."],"permissions":["lock","inspect"]},`, 1)
	authPath := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(authPath, []byte(file), 0o600))

	cert, err := mapped.Load()
	require.NoError(t, err)
	opts := &harness.GatewayTLS{CertFile: pair.CertFile, KeyFile: pair.KeyFile, RootCAs: ca.Pool, ClientCAFile: ca.File, ClientCert: &cert}
	r := harness.NewRedis(t, harness.RedisOptions{})
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: r, TLS: opts, Env: map[string]string{"LEASEGATE_AUTH_FILE": authPath}})
	c := harness.NewTLSClient(t, gw.URL, opts.ClientConfig())

	g := c.Do(http.MethodPost, "/locks/jobs.a", nil, testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/locks/jobs.a", testkit.TokenHeader(g.Str("token")), "").Status)
	assertAuthProblem(t, c.Do(http.MethodPost, "/locks/billing.a", nil, testkit.AcquireBody("w", 60000)), http.StatusForbidden, probForbidden, `principal "worker"`)
	// The bearer wins: billing may not use jobs., nor worker's lease.
	h := harness.Headers{"Authorization": "Bearer " + ps["billing"].Key, "Lease-Token": g.Str("token")}
	assertAuthProblem(t, c.Do(http.MethodDelete, "/locks/jobs.a", h, ""), http.StatusForbidden, probForbidden, `principal "billing"`)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/jobs.a", testkit.TokenHeader(g.Str("token")), "").Status)

	strangerCert, err := unmapped.Load()
	require.NoError(t, err)
	cfg := opts.ClientConfig()
	cfg.Certificates = []tls.Certificate{strangerCert}
	s := harness.NewTLSClient(t, gw.URL, cfg)
	assertAuthProblem(t, s.Do(http.MethodPost, "/locks/jobs.b", nil, testkit.AcquireBody("w", 60000)), http.StatusUnauthorized, testkit.ProbUnauthenticated, `subject "CN=stranger"`)
	r2 := s.Do(http.MethodPost, "/locks/billing.b", harness.Headers{"Authorization": "Bearer " + ps["billing"].Key}, testkit.AcquireBody("w", 60000))
	assert.Equal(t, http.StatusCreated, r2.Status, "%s", r2.Body)
}
