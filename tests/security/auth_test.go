package security

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// probForbidden is the problem type of a 403 (see testkit.ProbUnauthenticated for a 401).
const probForbidden = "urn:leasegate:problem:forbidden"

// authEnv is a testkit.Env whose gateway reads an auth file.
type authEnv struct {
	*testkit.Env
	path       string
	principals map[string]*testkit.Principal
}

func newAuthEnv(t *testing.T, gwEnv map[string]string) *authEnv {
	t.Helper()
	return newAuthEnvOf(t, testkit.Principals(), gwEnv)
}

// newAuthEnvOf is newAuthEnv with principals ps.
func newAuthEnvOf(t *testing.T, ps map[string]*testkit.Principal, gwEnv map[string]string) *authEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "auth.json")
	require.NoError(t, os.WriteFile(path, testkit.AuthFile(ps), 0o600))
	env := map[string]string{"LEASEGATE_AUTH_FILE": path}
	for k, v := range gwEnv {
		env[k] = v
	}
	return &authEnv{Env: testkit.NewEnv(t, env), path: path, principals: ps}
}

// as returns headers authenticating as principal name, plus a Lease-Token when token is set.
func (e *authEnv) as(name, token string) harness.Headers {
	h := harness.Headers{"Authorization": "Bearer " + e.principals[name].Key}
	if token != "" {
		h["Lease-Token"] = token
	}
	return h
}

// assertProblem checks a 401 or 403 answer: its status, type, and that detail says want.
func assertAuthProblem(t *testing.T, r *harness.Response, status int, typ, want string) {
	t.Helper()
	assert.Equal(t, status, r.Status, "%s", r.Body)
	assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	assert.Equal(t, typ, r.Str("type"), "%s", r.Body)
	assert.Contains(t, r.Str("detail"), want)
	if status == http.StatusUnauthorized {
		assert.Equal(t, `Bearer realm="leasegate"`, r.Header.Get("WWW-Authenticate"))
		assert.NotContains(t, strings.ToLower(r.Str("detail")), "unauthenticated", "the title says it; the detail says why")
	}
}

// TestAuthPermissionsAndPrefixes: each permission and prefix allowed and refused, 401 without a
// valid key; nothing refused reaches Redis.
func TestAuthPermissionsAndPrefixes(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls on one Redis server")
	e := newAuthEnv(t, nil)
	c := e.Client

	// Open routes stay open.
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/metrics"} {
		assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, path, nil, "").Status, path)
	}

	held := c.Do(http.MethodPost, "/locks/billing.held", e.as("billing", ""), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, held.Status, "%s", held.Body)
	before := testkit.EvalCalls(t, e.Env)
	for _, tc := range []struct {
		name     string
		headers  harness.Headers
		wantType string
		want     string
	}{
		{"no key", nil, testkit.ProbUnauthenticated, "send Authorization: Bearer"},
		{"unknown key", harness.Headers{"Authorization": "Bearer lgk_not-a-key"}, testkit.ProbUnauthenticated, "not known"},
		{"a key's hash", harness.Headers{"Authorization": "Bearer " + auth.HashKey(e.principals["billing"].Key)}, testkit.ProbUnauthenticated, "not known"},
		{"basic", harness.Headers{"Authorization": "Basic YTpi"}, testkit.ProbUnauthenticated, "not \"Bearer"},
		{"a lease token as the bearer", harness.Headers{"Authorization": "Bearer " + held.Str("token")}, testkit.ProbUnauthenticated,
			"the bearer value is a lease token, not an API key: send lease tokens as Lease-Token"},
	} {
		r := c.Do(http.MethodPost, "/locks/billing.a", tc.headers, testkit.AcquireBody("w", 60000))
		assertAuthProblem(t, r, http.StatusUnauthorized, tc.wantType, tc.want)
	}

	refused := []struct {
		who, method, path, body string
		permission, name        string
	}{
		{"reader", http.MethodPost, "/locks/billing.a", testkit.AcquireBody("w", 60000), "lock", ""},
		{"billing", http.MethodPost, "/locks/orders.a", testkit.AcquireBody("w", 60000), "", "orders.a"},
		{"billing", http.MethodPost, "/semaphores/orders.s", `{"owner":"w","permits":2}`, "", "orders.s"},
		{"billing", http.MethodGet, "/locks/orders.a", "", "", "orders.a"},
		{"billing", http.MethodGet, "/semaphores/shared.other", "", "", "shared.other"},
		{"billing", http.MethodPost, "/locks/orders.a/renew", "", "", "orders.a"},
		{"billing-ops", http.MethodGet, "/locks/billing.a", "", "inspect", ""},
		{"billing", http.MethodDelete, "/locks/billing.a?force=true", "", "admin", ""},
		{"billing-ops", http.MethodDelete, "/locks/orders.a?force=true", "", "", "orders.a"},
		{"billing", http.MethodPost, "/multilocks", testkit.MultiBody("w", []string{"billing.a", "orders.b"}, 60000, 0, ""), "", "orders.b"},
		{"reader", http.MethodPost, "/multilocks", testkit.MultiBody("w", []string{"billing.a", "billing.b"}, 60000, 0, ""), "lock", ""},
	}
	for _, tc := range refused {
		r := c.Do(tc.method, tc.path, e.as(tc.who, ""), tc.body)
		want := fmt.Sprintf("may not use the name %q", tc.name)
		if tc.permission != "" {
			want = fmt.Sprintf("lacks the %q permission", tc.permission)
		}
		assertAuthProblem(t, r, http.StatusForbidden, probForbidden, want)
		assert.Equal(t, tc.permission, r.Str("permission"), "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.name, r.Str("name"), "%s %s", tc.method, tc.path)
	}
	assert.Equal(t, before, testkit.EvalCalls(t, e.Env), "a refused request ran a script")

	// Allowed: each permission within the prefixes.
	g := c.Do(http.MethodPost, "/locks/shared.reports.q3", e.as("billing", ""), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	tok := g.Str("token")
	assert.Equal(t, http.StatusOK, c.Do(http.MethodPost, "/locks/shared.reports.q3", e.as("billing", tok), testkit.AcquireBody("w", 60000)).Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodPost, "/locks/shared.reports.q3/renew", e.as("billing", tok), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/locks/shared.reports.q3", e.as("inspect-only", ""), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/locks/shared.reports.q3", e.as("billing", tok), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/shared.reports.q3", e.as("billing", tok), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/shared.reports.q3", e.as("billing", tok), "").Status)
	s := c.Do(http.MethodPost, "/semaphores/billing.s", e.as("billing", ""), `{"owner":"w","permits":2}`)
	require.Equal(t, http.StatusCreated, s.Status, "%s", s.Body)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/semaphores/billing.s", e.as("billing", s.Str("token")), "").Status)
	m := c.Do(http.MethodPost, "/multilocks", e.as("billing", ""), testkit.MultiBody("w", []string{"billing.a", "shared.reports.b"}, 60000, 0, ""))
	require.Equal(t, http.StatusCreated, m.Status, "%s", m.Body)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodPost, "/multilocks/renew", e.as("billing", m.Str("token")), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/multilocks", e.as("billing", m.Str("token")), "").Status)

	// The principal is in the access log, the key never.
	assert.Equal(t, http.StatusForbidden, c.Do(http.MethodPost, "/locks/orders.z", e.as("billing", ""), testkit.AcquireBody("w", 1000)).Status)
	harness.Eventually(t, 5*time.Second, "the access log line", func() bool {
		return strings.Contains(e.Gateway.Logs(), `"principal":"billing"`)
	})
	assert.NotContains(t, e.Gateway.Logs(), e.principals["billing"].Key)
}

// TestAuthTokenBelongsToPrincipal: a lease's token, presented by another principal (with every
// permission and prefix the lease needs), is refused 403 on release, renew, re-entry and inspect,
// and the lease is untouched.
func TestAuthTokenBelongsToPrincipal(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls on one Redis server")
	e := newAuthEnv(t, nil)
	c := e.Client
	g := c.Do(http.MethodPost, "/locks/billing.mine", e.as("billing", ""), `{"owner":"w","ttl_ms":60000,"wait_ms":1000}`)
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	tok := g.Str("token")
	s := c.Do(http.MethodPost, "/semaphores/billing.sem", e.as("billing", ""), `{"owner":"w","permits":3,"ttl_ms":60000}`)
	require.Equal(t, http.StatusCreated, s.Status, "%s", s.Body)
	m := c.Do(http.MethodPost, "/multilocks", e.as("billing", ""), testkit.MultiBody("w", []string{"billing.m1", "billing.m2"}, 60000, 0, ""))
	require.Equal(t, http.StatusCreated, m.Status, "%s", m.Body)

	before := testkit.EvalCalls(t, e.Env)
	for _, tc := range []struct{ method, path, token, body string }{
		{http.MethodDelete, "/locks/billing.mine", tok, ""},
		{http.MethodPost, "/locks/billing.mine/renew", tok, ""},
		{http.MethodPost, "/locks/billing.mine", tok, testkit.AcquireBody("w", 60000)},
		{http.MethodGet, "/locks/billing.mine", tok, ""},
		{http.MethodDelete, "/semaphores/billing.sem", s.Str("token"), ""},
		{http.MethodPost, "/semaphores/billing.sem/renew", s.Str("token"), ""},
		{http.MethodDelete, "/multilocks", m.Str("token"), ""},
		{http.MethodPost, "/multilocks/" + m.Str("id") + "/renew", m.Str("token"), ""},
	} {
		r := c.Do(tc.method, tc.path, e.as("billing-2", tc.token), tc.body)
		assertAuthProblem(t, r, http.StatusForbidden, probForbidden, `belongs to principal "billing"`)
	}
	assert.Equal(t, before, testkit.EvalCalls(t, e.Env), "a refused request ran a script")

	// The owner still holds everything, with its fence.
	r := c.Do(http.MethodGet, "/locks/billing.mine", e.as("billing", tok), "")
	assert.Equal(t, true, r.JSON()["yours"])
	assert.Equal(t, int64(1), r.Int("holds"))
	assert.Equal(t, g.Int("fence"), r.Int("fence"))
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/billing.mine", e.as("billing", tok), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/semaphores/billing.sem", e.as("billing", s.Str("token")), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/multilocks", e.as("billing", m.Str("token")), "").Status)

	// A waiter's grant (handed over on release) carries its principal too.
	held := c.Do(http.MethodPost, "/locks/billing.line", e.as("billing", ""), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, held.Status)
	waited := make(chan *harness.Response, 1)
	go func() {
		waited <- c.Do(http.MethodPost, "/locks/billing.line", e.as("billing-2", ""), `{"owner":"w2","ttl_ms":60000,"wait_ms":10000}`)
	}()
	harness.Eventually(t, 5*time.Second, "the waiter in line", func() bool {
		return c.Do(http.MethodGet, "/locks/billing.line", e.as("billing", ""), "").Int("waiters") == 1
	})
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/billing.line", e.as("billing", held.Str("token")), "").Status)
	w := <-waited
	require.Equal(t, http.StatusCreated, w.Status, "%s", w.Body)
	r = c.Do(http.MethodDelete, "/locks/billing.line", e.as("billing", w.Str("token")), "")
	assertAuthProblem(t, r, http.StatusForbidden, probForbidden, `belongs to principal "billing-2"`)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/billing.line", e.as("billing-2", w.Str("token")), "").Status)

	// A token minted without authentication is nobody's: refused too.
	open := testkit.NewEnv(t, nil)
	plain := open.Client.Do(http.MethodPost, "/locks/billing.x", nil, testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, plain.Status)
	r = c.Do(http.MethodDelete, "/locks/billing.x", e.as("billing", plain.Str("token")), "")
	assertAuthProblem(t, r, http.StatusForbidden, probForbidden, "minted without authentication")
	// And the gateway without an auth file said so, once.
	assert.Equal(t, 1, strings.Count(open.Gateway.Logs(), "LEASEGATE_AUTH_FILE is unset"))
}

// TestAuthAdminRoutes: listings, /admin/top and force release need admin, and a principal with
// admin on some prefixes lists only under them; the dashboard's files are open.
func TestAuthAdminRoutes(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	c := e.Client
	g := c.Do(http.MethodPost, "/locks/billing.held", e.as("billing", ""), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, g.Status)

	for _, path := range []string{"/locks", "/semaphores", "/admin/top"} {
		assertAuthProblem(t, c.Do(http.MethodGet, path, nil, ""), http.StatusUnauthorized, testkit.ProbUnauthenticated, "Bearer")
		r := c.Do(http.MethodGet, path, e.as("billing", ""), "")
		assertAuthProblem(t, r, http.StatusForbidden, probForbidden, `lacks the "admin" permission`)
		assert.Equal(t, "admin", r.Str("permission"))
		assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, path, e.as("ops", ""), "").Status, path)
	}
	// The dashboard's files (outside the spec: plain requests) hold no data, so anyone may load
	// them; the page then asks for a key, and its calls are the admin routes above.
	for _, path := range []string{"/ui", "/ui/app.js"} {
		for who, want := range map[string]int{"": http.StatusOK, "billing": http.StatusOK, "billing-ops": http.StatusOK, "ops": http.StatusOK} {
			req, err := http.NewRequest(http.MethodGet, e.Gateway.URL+path, nil)
			require.NoError(t, err)
			if who != "" {
				req.Header.Set("Authorization", "Bearer "+e.principals[who].Key)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, want, resp.StatusCode, "%s as %q", path, who)
		}
	}

	// Admin on billing. only: listings under billing., nothing that shows every name.
	assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/locks?prefix=billing.h", e.as("billing-ops", ""), "").Status)
	assertAuthProblem(t, c.Do(http.MethodGet, "/locks", e.as("billing-ops", ""), ""), http.StatusForbidden, probForbidden, `may not list the names under ""`)
	assertAuthProblem(t, c.Do(http.MethodGet, "/semaphores?prefix=bill", e.as("billing-ops", ""), ""), http.StatusForbidden, probForbidden, `"bill"`)
	assertAuthProblem(t, c.Do(http.MethodGet, "/admin/top", e.as("billing-ops", ""), ""), http.StatusForbidden, probForbidden, `lacks the prefix "*"`)

	r := c.Do(http.MethodDelete, "/locks/billing.held?force=true", e.as("billing-ops", ""), "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, int64(1), r.Int("holds_removed"))
	harness.Eventually(t, 5*time.Second, "the audit line", func() bool {
		return strings.Contains(e.Gateway.Logs(), `"principal":"billing-ops"`) && strings.Contains(e.Gateway.Logs(), "lock force-released")
	})
}

// TestAuthMetricsAdmin: LEASEGATE_METRICS_AUTH=admin protects /metrics; the probes stay open.
func TestAuthMetricsAdmin(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, map[string]string{"LEASEGATE_METRICS_AUTH": "admin"})
	c := e.Client
	assertAuthProblem(t, c.Do(http.MethodGet, "/metrics", nil, ""), http.StatusUnauthorized, testkit.ProbUnauthenticated, "Bearer")
	assertAuthProblem(t, c.Do(http.MethodGet, "/metrics", e.as("billing", ""), ""), http.StatusForbidden, probForbidden, "admin")
	assertAuthProblem(t, c.Do(http.MethodGet, "/metrics", e.as("billing-ops", ""), ""), http.StatusForbidden, probForbidden, `prefix "*"`)
	r := c.Do(http.MethodGet, "/metrics", e.as("ops", ""), "")
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Contains(t, string(r.Body), "leasegate_")
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
		assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, path, nil, "").Status, path)
	}
}

// TestAuthReload: the file is re-read on SIGHUP and when it changes, a broken file keeps the last
// good one, and neither a lease nor a parked request notices.
func TestAuthReload(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	c := e.Client
	fi, err := os.Stat(e.path)
	require.NoError(t, err)
	mtime := fi.ModTime()

	held := c.Do(http.MethodPost, "/locks/billing.r", e.as("billing", ""), testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, held.Status)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	parked := make(chan *harness.Response, 1)
	go func() {
		parked <- c.DoContext(ctx, http.MethodPost, "/locks/billing.r", e.as("billing", ""), `{"owner":"w2","ttl_ms":60000,"wait_ms":15000}`)
	}()
	harness.Eventually(t, 5*time.Second, "the parked request", func() bool {
		return c.Do(http.MethodGet, "/locks/billing.r", e.as("billing", ""), "").Int("waiters") == 1
	})

	// SIGHUP: billing's key rotated in a file of the same size and modification time (a change is
	// told by content), loaded on the signal (or the next poll, a second later at most).
	oldKey := e.principals["billing"].Key
	e.principals["billing"].Key, _ = auth.NewKey()
	writeAuthFile(t, e.path, testkit.AuthFile(e.principals), mtime)
	require.NoError(t, e.Gateway.Hangup())
	harness.Eventually(t, 5*time.Second, "the new key after SIGHUP", func() bool {
		return c.Do(http.MethodGet, "/locks/billing.r", e.as("billing", ""), "").Status == http.StatusOK
	})
	r := c.Do(http.MethodGet, "/locks/billing.r", harness.Headers{"Authorization": "Bearer " + oldKey}, "")
	assertAuthProblem(t, r, http.StatusUnauthorized, testkit.ProbUnauthenticated, "not known")

	// A change of the file: a principal added, picked up by polling.
	e.principals["late"] = &testkit.Principal{Name: "late", Prefixes: []string{"late."}, Permissions: []auth.Permission{auth.Lock}}
	e.principals["late"].Key, _ = auth.NewKey()
	writeAuthFile(t, e.path, testkit.AuthFile(e.principals), mtime.Add(time.Second))
	harness.Eventually(t, 5*time.Second, "the added principal", func() bool {
		return c.Do(http.MethodPost, "/locks/late.x", e.as("late", ""), testkit.AcquireBody("w", 1000)).Status == http.StatusCreated
	})

	// A broken file: logged, and the last good one stays in service.
	writeAuthFile(t, e.path, []byte(`{"principals": [{"name": "half"`), mtime)
	harness.Eventually(t, 5*time.Second, "the reload failure in the log", func() bool {
		return strings.Contains(e.Gateway.Logs(), "auth file reload failed")
	})
	require.NoError(t, e.Gateway.Hangup())
	harness.Eventually(t, 5*time.Second, "the second reload failure in the log", func() bool {
		return strings.Count(e.Gateway.Logs(), "auth file reload failed") == 2
	})
	assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/locks/billing.r", e.as("billing", ""), "").Status)

	// The lease taken before the reloads renews and releases; the parked request gets the lock.
	assert.Equal(t, http.StatusOK, c.Do(http.MethodPost, "/locks/billing.r/renew", e.as("billing", held.Str("token")), "").Status)
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/billing.r", e.as("billing", held.Str("token")), "").Status)
	w := <-parked
	assert.Equal(t, http.StatusCreated, w.Status, "%s", w.Body)
	assert.Equal(t, "w2", w.Str("owner"))
}

// writeAuthFile replaces the auth file's contents and sets its modification time: the same time
// each write, as a rename within the file system's timestamp granularity can leave it.
func writeAuthFile(t *testing.T, path string, data []byte, mtime time.Time) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
	require.NoError(t, os.Chtimes(path, mtime, mtime))
}
