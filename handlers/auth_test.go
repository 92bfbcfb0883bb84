package handlers

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// authConfig is an auth file of two principals: "app" (lock and inspect on "app.") and "ops"
// (everything on every name), with their keys.
func authConfig(t testing.TB) (c *auth.Config, appKey, opsKey string) {
	t.Helper()
	appKey, appHash := auth.NewKey()
	opsKey, opsHash := auth.NewKey()
	c, err := auth.Parse([]byte(`{"principals":[
		{"name":"app","keys":["` + appHash + `"],"prefixes":["app."],"permissions":["lock","inspect"]},
		{"name":"ops","keys":["` + opsHash + `"],"prefixes":["*"],"permissions":["lock","inspect","admin"]}]}`))
	require.NoError(t, err)
	return c, appKey, opsKey
}

// recordingLocker is instantLocker, remembering the principal of each acquire.
type recordingLocker struct {
	instantLocker
	mu         sync.Mutex
	principals []string
}

func (l *recordingLocker) Acquire(ctx context.Context, req lockcore.AcquireRequest) (lockcore.Grant, error) {
	l.mu.Lock()
	l.principals = append(l.principals, req.Principal)
	l.mu.Unlock()
	lease := lockcore.Lease{Lock: req.Lock, Owner: req.Owner, ID: "3f2b8c1e-5d4a-4e6f-9a7b-1c2d3e4f5a6b", Fence: 1, Principal: req.Principal}
	return lockcore.Grant{Lease: lease, Token: l.tokens.Mint(lease), TTL: req.TTL, Holds: 1}, nil
}

// principalLocker is instantLocker minting the principal into its tokens, as lockcore does.
type principalLocker struct{ instantLocker }

func (l principalLocker) Acquire(_ context.Context, req lockcore.AcquireRequest) (lockcore.Grant, error) {
	lease := lockcore.Lease{Lock: req.Lock, Owner: req.Owner, ID: uuid.NewString(), Fence: 1, Principal: req.Principal}
	return lockcore.Grant{Lease: lease, Token: l.tokens.Mint(lease), TTL: req.TTL, ExpiresAt: time.Now().Add(req.TTL), Holds: 1}, nil
}

// TestGuard: which request gets through to the lock engine, and the principal it is given.
func TestGuard(t *testing.T) {
	tokens, err := lockcore.NewTokens([]byte("guard-test-secret-0123456789"))
	require.NoError(t, err)
	c, appKey, opsKey := authConfig(t)
	locker := &recordingLocker{instantLocker: instantLocker{tokens}}
	h := NewRouter(locker, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: c,
		Limits: api.Limits{DefaultTTL: time.Second, MaxTTL: time.Hour, MaxWait: time.Minute, MaxHold: time.Hour}})
	do := func(method, path, key, token, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if token != "" {
			req.Header.Set("Lease-Token", token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	problem := func(w *httptest.ResponseRecorder) api.Problem {
		var p api.Problem
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), w.Body.String())
		return p
	}

	for _, tc := range []struct {
		name, method, path, key, token string
		status                         int
		typ, permission, detail        string
	}{
		{"no key", "POST", "/locks/app.a", "", "", 401, api.TypeUnauthenticated, "", "Bearer"},
		{"bad key", "POST", "/locks/app.a", "lgk_x", "", 401, api.TypeUnauthenticated, "", "not known"},
		{"bad name before prefix", "POST", "/locks/a$b", appKey, "", 400, api.TypeInvalidLockName, "", ""},
		{"prefix", "POST", "/locks/other.a", appKey, "", 403, api.TypeForbidden, "", `"other.a"`},
		{"force needs admin", "DELETE", "/locks/app.a?force=true", appKey, "", 403, api.TypeForbidden, "admin", ""},
		{"healthz open", "GET", "/healthz", "", "", 200, "", "", ""},
		{"unknown route", "GET", "/nope", "", "", 404, api.TypeNotFound, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := do(tc.method, tc.path, tc.key, tc.token, `{"owner":"o"}`)
			require.Equal(t, tc.status, w.Code, w.Body.String())
			if tc.typ == "" {
				return
			}
			p := problem(w)
			assert.Equal(t, tc.typ, p.Type)
			assert.Equal(t, tc.permission, p.Permission)
			assert.Contains(t, p.Detail, tc.detail)
			if tc.status == 401 {
				assert.Equal(t, `Bearer realm="leasegate"`, w.Header().Get("WWW-Authenticate"))
			}
		})
	}
	assert.Empty(t, locker.principals, "a refused request reached the lock engine")

	w := do("POST", "/locks/app.a", appKey, "", `{"owner":"o"}`)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.Equal(t, []string{"app"}, locker.principals)
	var g api.Grant
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &g))
	// The token is its principal's: ops (every permission, every name) may not use it.
	w = do("DELETE", "/locks/app.a", opsKey, g.Token, "")
	assert.Equal(t, http.StatusForbidden, w.Code)
	assert.Contains(t, problem(w).Detail, `belongs to principal "app"`)
	assert.Equal(t, http.StatusOK, do("DELETE", "/locks/app.a", appKey, g.Token, "").Code)

	// Multi-locks: every member of the body must be allowed, before the lock engine is called.
	w = do("POST", "/multilocks", appKey, "", `{"owner":"o","locks":["app.a","zzz"]}`)
	assert.Equal(t, http.StatusForbidden, w.Code, w.Body.String())
	assert.Equal(t, "zzz", problem(w).Name)
}

// jwtBenchConfig is authConfig's file with a "jwt" member verifying the returned ES256 and RS256
// tokens of principal "jwt:app" (lock and inspect on "app.", from their claims).
func jwtBenchConfig(b *testing.B) (c *auth.Config, apiKey, es256, rs256 string) {
	b.Helper()
	dir := b.TempDir()
	es, err := harness.NewJWTKey("es")
	require.NoError(b, err)
	rs, err := harness.NewRSAJWTKey("rs")
	require.NoError(b, err)
	require.NoError(b, harness.WriteJWKS(filepath.Join(dir, "jwks.json"), es, rs))
	apiKey, hash := auth.NewKey()
	require.NoError(b, os.WriteFile(filepath.Join(dir, "auth.json"), []byte(`{"principals":[
		{"name":"app","keys":["`+hash+`"],"prefixes":["app."],"permissions":["lock","inspect"]}],
		"jwt":{"jwks_file":"jwks.json","issuer":"iss","audience":"leasegate","algorithms":["ES256","RS256"]}}`), 0o600))
	c, err = auth.Load(filepath.Join(dir, "auth.json"))
	require.NoError(b, err)
	claims := map[string]any{"iss": "iss", "aud": "leasegate", "sub": "app", "exp": time.Now().Add(time.Hour).Unix(),
		"leasegate_prefixes": []string{"app."}, "leasegate_permissions": []string{"lock", "inspect"}}
	es256, err = es.Sign(claims, true)
	require.NoError(b, err)
	rs256, err = rs.Sign(claims, true)
	require.NoError(b, err)
	return c, apiKey, es256, rs256
}

// BenchmarkAuthCycle is BenchmarkAcquireReleaseCycle's cycle (through the router, no Redis)
// without authentication, with an API key and with JWTs (ES256, RS256): the difference is what
// authentication costs a cycle in the HTTP layer (two key hashes or two JWT verifications, two
// permission and prefix checks, one token principal check).
func BenchmarkAuthCycle(b *testing.B) {
	tokens, _ := lockcore.NewTokens([]byte("bench-secret-bench-secret-bench-secret"))
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	limits := api.Limits{DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute, MaxHold: time.Hour}
	c, key, es256, rs256 := jwtBenchConfig(b)
	for _, tc := range []struct {
		name string
		auth Authenticator
		key  string
	}{{"off", nil, ""}, {"api-key", c, key}, {"jwt-es256", c, es256}, {"jwt-rs256", c, rs256}} {
		b.Run(tc.name, func(b *testing.B) {
			h := NewRouter(principalLocker{instantLocker{tokens}}, Options{Logger: log, Limits: limits, Auth: tc.auth})
			b.ReportAllocs()
			for b.Loop() {
				authCycle(b, h, tc.key)
			}
		})
	}
}

func authCycle(b *testing.B, h http.Handler, key string) {
	req := httptest.NewRequest(http.MethodPost, "/locks/app.bench", strings.NewReader(`{"owner":"bench","ttl_ms":30000}`))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusCreated {
		b.Fatal(w.Code, w.Body.String())
	}
	token := w.Body.String()
	token = token[strings.Index(token, `"token":"`)+9:]
	token = token[:strings.IndexByte(token, '"')]
	req = httptest.NewRequest(http.MethodDelete, "/locks/app.bench", nil)
	req.Header.Set("Lease-Token", token)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatal(w.Code, w.Body.String())
	}
}

// BenchmarkAuthCycleRedis is the whole uncontended cycle without authentication, with an API key
// and with JWTs (ES256, RS256), side by side (and modes "off+header", "off+jwt-header", see below): a real redis-server, the real lock engine, the router behind loopback HTTP
// servers (one per mode), 8 clients cycling on distinct names. Each iteration runs a slice of
// cycles against each mode in turn, so that the machine's background load falls on both alike;
// it reports each mode's cycles/s and the process's CPU (gateway and clients) per cycle:
//
//	go test ./handlers -run '^$' -bench AuthCycleRedis -benchtime 20x
func BenchmarkAuthCycleRedis(b *testing.B) {
	r := harness.NewRedis(b, harness.RedisOptions{})
	client, err := rueidis.NewClient(lockcore.ClientOption(r.Addr, ""))
	require.NoError(b, err)
	defer client.Close()
	tokens, _ := lockcore.NewTokens([]byte(harness.TestTokenSecret))
	svc, err := lockcore.New(client, tokens, lockcore.Options{KeyPrefix: harness.RandomPrefix()})
	require.NoError(b, err)
	defer svc.Close()
	// The same engine counting each principal's holds (LEASEGATE_QUOTA_HELD), under a cap the
	// benchmark never reaches.
	held, err := lockcore.New(client, tokens, lockcore.Options{KeyPrefix: harness.RandomPrefix(), MaxHeld: 1000})
	require.NoError(b, err)
	defer held.Close()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	limits := api.Limits{DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute, MaxHold: time.Hour}
	c, key, es256, rs256 := jwtBenchConfig(b)
	type mode struct {
		name, url, key   string
		auth, tls, quota bool
		hc               *http.Client
		cycles           int64
		wall, cpu        time.Duration
	}
	// "off+header" sends the key to a gateway without authentication: what carrying the header
	// costs the HTTP client and server, apart from checking it.
	// "off+jwt-header" likewise sends the RS256 JWT (the longer one).
	modes := []*mode{{name: "off"}, {name: "api-key", key: key, auth: true}, {name: "off+header", key: key},
		{name: "jwt-es256", key: es256, auth: true}, {name: "jwt-rs256", key: rs256, auth: true},
		{name: "off+jwt-header", key: rs256},
		// HTTPS (TLS 1.3, an ECDSA certificate of httptest's) without and with an API key.
		{name: "tls", tls: true}, {name: "tls+api-key", key: key, auth: true, tls: true},
		// An API key, each principal's holds counted in Redis.
		{name: "api-key+held", key: key, auth: true, quota: true}}
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for _, m := range modes {
		var authn Authenticator
		if m.auth {
			authn = c
		}
		engine := svc
		if m.quota {
			engine = held
		}
		h := NewRouter(engine, Options{Logger: log, Limits: limits, Auth: authn})
		srv, mc := httptest.NewUnstartedServer(h), hc
		if m.tls {
			srv.StartTLS()
			ttr := srv.Client().Transport.(*http.Transport).Clone()
			ttr.MaxIdleConns, ttr.MaxIdleConnsPerHost = 64, 64
			defer ttr.CloseIdleConnections()
			mc = &http.Client{Transport: ttr}
		} else {
			srv.Start()
		}
		defer srv.Close()
		m.url, m.hc = srv.URL, mc
	}
	const clients, slice = 8, 250 * time.Millisecond
	for b.Loop() {
		for _, m := range modes {
			n, wall, cpu, err := cycleFor(m.hc, m.url, m.key, clients, slice)
			if err != nil {
				b.Fatal(err)
			}
			m.cycles, m.wall, m.cpu = m.cycles+n, m.wall+wall, m.cpu+cpu
		}
	}
	for _, m := range modes {
		b.ReportMetric(float64(m.cycles)/m.wall.Seconds(), m.name+"-cycles/s")
		b.ReportMetric(float64(m.cpu.Microseconds())/float64(m.cycles), m.name+"-cpu-µs/cycle")
	}
	off := modes[0]
	for _, on := range []*mode{modes[1], modes[3], modes[4], modes[6], modes[7], modes[8]} {
		b.ReportMetric(100*(1-(float64(on.cycles)/on.wall.Seconds())/(float64(off.cycles)/off.wall.Seconds())), on.name+"-%-throughput-lost")
	}
	keyOnly, counted := modes[1], modes[8]
	b.ReportMetric(100*(1-(float64(counted.cycles)/counted.wall.Seconds())/(float64(keyOnly.cycles)/keyOnly.wall.Seconds())), "held-vs-api-key-%-throughput-lost")
}

// cycleFor runs acquire+release cycles against base from n clients (each on a name of its own)
// for d, and returns how many completed, the wall time and the process's CPU time it took.
func cycleFor(hc *http.Client, base, key string, n int, d time.Duration) (int64, time.Duration, time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		done  int64
		first error
	)
	cpu0, start := processCPU(), time.Now()
	deadline := start.Add(d)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := base + "/locks/app.bench-" + strconv.Itoa(i)
			var k int64
			var err error
			for time.Now().Before(deadline) {
				var tok string
				if tok, err = call(hc, http.MethodPost, name, key, "", `{"owner":"bench","ttl_ms":30000}`, http.StatusCreated); err == nil {
					_, err = call(hc, http.MethodDelete, name, key, tok, "", http.StatusOK)
				}
				if err != nil {
					break
				}
				k++
			}
			mu.Lock()
			done += k
			if first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return done, time.Since(start), processCPU() - cpu0, first
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// call sends one request and returns the answer's token, or an error when the status is not want.
func call(c *http.Client, method, url, key, token, body string, want int) (string, error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if token != "" {
		req.Header.Set("Lease-Token", token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		return "", &statusError{resp.StatusCode, buf.String()}
	}
	var g struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal(buf.Bytes(), &g)
	return g.Token, nil
}

type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return http.StatusText(e.status) + ": " + e.body }

// TestGuardCertificateAndJWT: a verified client certificate's subject authenticates without an
// Authorization header, a bearer takes precedence over it, and a JWT is verified.
func TestGuardCertificateAndJWT(t *testing.T) {
	tokens, err := lockcore.NewTokens([]byte("guard-test-secret-0123456789"))
	require.NoError(t, err)
	key, err := harness.NewJWTKey("k1")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, harness.WriteJWKS(filepath.Join(dir, "jwks.json"), key))
	appKey, appHash := auth.NewKey()
	path := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"principals":[
		{"name":"app","keys":["`+appHash+`"],"prefixes":["app."],"permissions":["lock"]},
		{"name":"worker","certificate_subjects":["CN=worker-1,O=acme"],"prefixes":["work."],"permissions":["lock"]}],
		"jwt":{"jwks_file":"jwks.json","issuer":"iss","audience":"aud"}}`), 0o600))
	c, err := auth.Load(path)
	require.NoError(t, err)
	locker := &recordingLocker{instantLocker: instantLocker{tokens}}
	h := NewRouter(locker, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: c,
		Limits: api.Limits{DefaultTTL: time.Second, MaxTTL: time.Hour, MaxWait: time.Minute, MaxHold: time.Hour}})
	do := func(path, bearer, subject string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"owner":"o"}`))
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		if subject != "" {
			leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "worker-1", Organization: []string{"acme"}}}
			if subject != leaf.Subject.String() {
				leaf.Subject = pkix.Name{CommonName: subject}
			}
			req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	assert.Equal(t, http.StatusCreated, do("/locks/work.a", "", "CN=worker-1,O=acme").Code)
	w := do("/locks/work.a", "", "stranger")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Contains(t, w.Body.String(), `subject \"CN=stranger\" is no principal's`)
	// Both: the bearer's principal (app may not use work.).
	assert.Equal(t, http.StatusForbidden, do("/locks/work.a", appKey, "CN=worker-1,O=acme").Code)
	assert.Equal(t, http.StatusCreated, do("/locks/app.a", appKey, "CN=worker-1,O=acme").Code)

	jwt, err := key.Sign(map[string]any{"iss": "iss", "aud": "aud", "sub": "svc", "exp": time.Now().Add(time.Minute).Unix(),
		"leasegate_prefixes": "jobs.", "leasegate_permissions": "lock"}, true)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, do("/locks/jobs.a", jwt, "").Code)
	w = do("/locks/app.a", jwt, "")
	assert.Equal(t, http.StatusForbidden, w.Code)
	assert.Contains(t, w.Body.String(), `principal \"jwt:svc\"`)
	w = do("/locks/jobs.a", jwt[:len(jwt)-4]+"AAAA", "")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Contains(t, w.Body.String(), "the JWT is not accepted")
	assert.Equal(t, []string{"worker", "app", "jwt:svc"}, locker.principals)
}
