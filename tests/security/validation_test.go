package security

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// Problem types the validation tests expect (api/problem.go); spelled out so that a renamed
// constant breaks the test instead of silently changing the contract.
const (
	probInvalidRequest   = "urn:leasegate:problem:invalid-request"
	probInvalidLockName  = "urn:leasegate:problem:invalid-lock-name"
	probInvalidToken     = "urn:leasegate:problem:invalid-lease-token"
	probBodyTooLarge     = "urn:leasegate:problem:body-too-large"
	probNotFound         = "urn:leasegate:problem:not-found"
	probMethodNotAllowed = "urn:leasegate:problem:method-not-allowed"
)

// Limits the validation gateway runs with.
var validationEnv = map[string]string{"LEASEGATE_MAX_TTL": "10m", "LEASEGATE_MAX_WAIT": "60s"}

// badRequest is one malformed request and the problem it must get.
type badRequest struct {
	name    string
	method  string
	path    string
	headers harness.Headers
	body    string
	status  int
	typ     string
	// params are names that invalid_params must list (nil: not checked).
	params []string
}

// seeded is the state TestValidationRejectsWithoutTouchingRedis builds before the bad requests.
type seeded struct {
	heldToken, heldFence string
	otherToken           string
	held2Token           string // minted by a gateway with another token secret
}

func TestValidationRejectsWithoutTouchingRedis(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls and keys on one Redis server")
	e := testkit.NewEnv(t, validationEnv)
	s := seedValidation(t, e)
	scripts := monitorScripts(t, e.Redis)
	rc := connect(t, e.Redis)

	for _, tc := range validationCases(s) {
		t.Run(tc.name, func(t *testing.T) {
			before := keyspace(t, rc, e.Gateway.KeyPrefix)

			var r *harness.Response
			ran := scripts.during(t, func() { r = e.Client.Do(tc.method, tc.path, tc.headers, tc.body) })
			assertProblem(t, r, tc.status, tc.typ)
			if tc.params != nil {
				assert.Subset(t, invalidParamNames(r), tc.params, "invalid_params of %s", r.Body)
			}

			assert.Empty(t, ran, "the gateway ran a script for a request it rejects")
			assert.Equal(t, before, keyspace(t, rc, e.Gateway.KeyPrefix), "the gateway changed Redis for a request it rejects")
			assertStillHeld(t, e, s)
		})
	}

	t.Run("inspect without a token is fine", func(t *testing.T) {
		r := e.Client.Do(http.MethodGet, "/locks/held", nil, "")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		assert.NotContains(t, r.JSON(), "yours")
		assert.Equal(t, "w1", r.Str("owner"))
	})
	t.Run("a name of 200 bytes is valid", func(t *testing.T) {
		name := strings.Repeat("a", 200)
		r := e.Client.Do(http.MethodPost, "/locks/"+name, nil, testkit.AcquireBody("w1", 60000))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		assert.Equal(t, name, r.Str("lock"))
	})
}

// TestValidationPercentEncodedValidName: a client that percent-encodes characters of a valid
// name (JavaScript's encodeURIComponent and Python's quote(safe="") encode ':') names the same lock.
func TestValidationPercentEncodedValidName(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the lock's key on the Redis")
	e := testkit.NewEnv(t, validationEnv)
	for _, tc := range []struct{ path, lock string }{
		{"/locks/orders%3A42", "orders:42"},
		{"/locks/%41bc", "Abc"},
	} {
		t.Run(tc.lock, func(t *testing.T) {
			r := e.Client.Do(http.MethodPost, tc.path, nil, testkit.AcquireBody("w1", 60000))
			assert.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			assert.Equal(t, tc.lock, r.Str("lock"))
		})
	}
}

// seededTTL is the seeded leases' TTL in ms: they must outlive every case, however slow a busy
// machine makes them (the cases took 5 s on a quiet one); below LEASEGATE_LONG_HOLD, so that
// they stay out of the long-hold ledger.
const seededTTL = 300000

func seedValidation(t *testing.T, e *testkit.Env) seeded {
	t.Helper()
	var s seeded
	r := e.Client.Do(http.MethodPost, "/locks/held", nil, testkit.AcquireBody("w1", seededTTL))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	s.heldToken, s.heldFence = r.Str("token"), strconv.FormatInt(r.Int("fence"), 10)

	r = e.Client.Do(http.MethodPost, "/locks/other", nil, testkit.AcquireBody("w1", seededTTL))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	s.otherToken = r.Str("token")

	// A replica on the same Redis and key prefix but with another secret: its tokens name real
	// leases, so a gateway that skipped the signature check would act on them.
	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix,
		map[string]string{"LEASEGATE_TOKEN_SECRET": "another-secret-0123456789abcdef"}))
	r = harness.NewClient(t, gw2.URL).Do(http.MethodPost, "/locks/held2", nil, testkit.AcquireBody("w2", seededTTL))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	s.held2Token = r.Str("token")
	require.NoError(t, gw2.Stop())
	return s
}

func validationCases(s seeded) []badRequest {
	const okBody = `{"owner":"w1","ttl_ms":60000}`
	var cases []badRequest

	// Lock names, on every route that takes one.
	for _, n := range []struct{ name, segment string }{
		{"201 bytes", strings.Repeat("a", 201)},
		{"space", "bad%20name"},
		{"escaped slash", "a%2Fb"},
		{"non-ASCII", "%C3%BC"},
		{"braces", "a%7Bb%7D"},
		{"NUL", "a%00b"},
		{"percent", "a%25b"},
		{"a dot, encoded", "%2E"},
		{"two dots, encoded", "%2E%2E"},
		{"two dots, half encoded", ".%2E"},
	} {
		p := "/locks/" + n.segment
		cases = append(cases,
			badRequest{name: "acquire name " + n.name, method: http.MethodPost, path: p, body: okBody,
				status: 400, typ: probInvalidLockName},
			badRequest{name: "release name " + n.name, method: http.MethodDelete, path: p,
				headers: testkit.TokenHeader(s.heldToken), status: 400, typ: probInvalidLockName},
			badRequest{name: "renew name " + n.name, method: http.MethodPost, path: p + "/renew",
				headers: testkit.TokenHeader(s.heldToken), status: 400, typ: probInvalidLockName},
			badRequest{name: "inspect name " + n.name, method: http.MethodGet, path: p,
				status: 400, typ: probInvalidLockName},
		)
	}

	// Acquire bodies, on a free lock: a body wrongly accepted would create keys.
	for i, b := range []struct {
		name, body string
		params     []string
	}{
		{"not JSON", `hello`, nil},
		{"empty", ``, nil},
		{"array", `[]`, nil},
		{"null", `null`, []string{"owner"}},
		{"unknown field", `{"owner":"w","colour":1}`, []string{"colour"}},
		{"owner a number", `{"owner":5}`, []string{"owner"}},
		{"ttl_ms a string", `{"owner":"w","ttl_ms":"10"}`, []string{"ttl_ms"}},
		{"ttl_ms a fraction", `{"owner":"w","ttl_ms":1.5}`, []string{"ttl_ms"}},
		{"ttl_ms beyond int64", `{"owner":"w","ttl_ms":100000000000000000000}`, []string{"ttl_ms"}},
		{"watchdog a string", `{"owner":"w","watchdog":"yes"}`, []string{"watchdog"}},
		{"trailing object", `{"owner":"w"} {}`, nil},
		{"trailing garbage", `{"owner":"w"}x`, nil},
		{"owner missing", `{"ttl_ms":1000}`, []string{"owner"}},
		{"owner empty", `{"owner":""}`, []string{"owner"}},
		{"owner 129 chars", `{"owner":"` + strings.Repeat("o", 129) + `"}`, []string{"owner"}},
		{"owner with BEL", `{"owner":"w\u0007"}`, []string{"owner"}},
		{"owner with newline", `{"owner":"w\n1"}`, []string{"owner"}},
		{"owner invalid UTF-8", "{\"owner\":\"w\xff\"}", []string{"owner"}},
		{"owner lone surrogate", `{"owner":"w\ud800"}`, []string{"owner"}},
		{"ttl_ms 0", `{"owner":"w","ttl_ms":0}`, []string{"ttl_ms"}},
		{"ttl_ms -1", `{"owner":"w","ttl_ms":-1}`, []string{"ttl_ms"}},
		{"ttl_ms above max", `{"owner":"w","ttl_ms":600001}`, []string{"ttl_ms"}},
		{"wait_ms -1", `{"owner":"w","wait_ms":-1}`, []string{"wait_ms"}},
		// wait_ms above the maximum is capped, not refused (tests/locks TestWaitOverTheMaximumIsCapped)
		{"every field at once", `{"owner":"","ttl_ms":0,"wait_ms":-1}`, []string{"owner", "ttl_ms", "wait_ms"}},
		// encoding/json would take these (case-insensitive names, the last duplicate wins): a
		// proxy rule on "ttl_ms" could be bypassed.
		{"a name in other case", `{"owner":"w","TTL_MS":1000}`, []string{"TTL_MS"}},
		{"a name in mixed case", `{"Owner":"w"}`, []string{"Owner"}},
		{"a name twice", `{"owner":"w","ttl_ms":600000,"ttl_ms":1000}`, []string{"ttl_ms"}},
		{"owner twice", `{"owner":"w","owner":"x"}`, []string{"owner"}},
		{"an escaped name", `{"owner":"w","ttl\u005fms":1000}`, []string{"ttl_ms"}},
	} {
		// A lock of its own per case, so that a body wrongly accepted fails only its own case.
		cases = append(cases, badRequest{name: "acquire body " + b.name, method: http.MethodPost,
			path: "/locks/fresh." + strconv.Itoa(i), body: b.body, status: 400, typ: probInvalidRequest, params: b.params})
	}
	cases = append(cases,
		badRequest{name: "acquire body over 64 KiB", method: http.MethodPost, path: "/locks/fresh",
			body: `{"owner":"` + strings.Repeat("o", 70000) + `"}`, status: 413, typ: probBodyTooLarge},
		badRequest{name: "renew body over 64 KiB", method: http.MethodPost, path: "/locks/held/renew",
			headers: testkit.TokenHeader(s.heldToken), body: `{"ttl_ms":` + strings.Repeat(" ", 70000) + `1000}`,
			status: 413, typ: probBodyTooLarge},
	)

	// Lease tokens, on every route that reads one. Re-entry sends the holder's own owner.
	routes := []struct{ name, method, suffix, body string }{
		{"release", http.MethodDelete, "", ""},
		{"renew", http.MethodPost, "/renew", ""},
		{"re-enter", http.MethodPost, "", okBody},
		{"inspect", http.MethodGet, "", ""},
	}
	tokens := []struct {
		name, token string
		only        map[string]bool // routes the case applies to; nil: all
	}{
		{"missing", "", map[string]bool{"release": true, "renew": true}},
		{"garbage", "garbage", nil},
		{"only a dot", ".", nil},
		{"signature altered", harness.AlterSignature(s.heldToken), nil},
		{"signature truncated", s.heldToken[:len(s.heldToken)-1], nil},
		{"payload lease altered", alterPayload(s.heldToken, "lease", uuid.NewString()), nil},
		{"payload fence altered", alterPayload(s.heldToken, "fence", json.Number(s.heldFence+"1")), nil},
		{"payload owner altered", alterPayload(s.heldToken, "owner", "w2"), nil},
		{"forged with another secret", forgeToken(s.heldToken, "another-secret-0123456789abcdef"), nil},
		{"token of another lock", s.otherToken, nil},
		{"over-long", s.heldToken + strings.Repeat("A", 3000), nil},
		// A decoder that ignores the trailing bits of base64 accepts a second spelling of the
		// signature. Only on routes where accepting it does not release or re-enter the lease,
		// so that one bug does not cascade through the remaining cases.
		{"signature with non-canonical trailing bits", harness.NoncanonicalSignature(s.heldToken),
			map[string]bool{"renew": true, "inspect": true}},
	}
	for _, rt := range routes {
		for _, tk := range tokens {
			if tk.only != nil && !tk.only[rt.name] {
				continue
			}
			var h harness.Headers
			if tk.token != "" {
				h = testkit.TokenHeader(tk.token)
			}
			cases = append(cases, badRequest{name: rt.name + " token " + tk.name, method: rt.method,
				path: "/locks/held" + rt.suffix, headers: h, body: rt.body, status: 400, typ: probInvalidToken})
		}
		body := strings.ReplaceAll(rt.body, "w1", "w2")
		cases = append(cases, badRequest{name: rt.name + " token from a replica with another secret",
			method: rt.method, path: "/locks/held2" + rt.suffix, headers: testkit.TokenHeader(s.held2Token), body: body,
			status: 400, typ: probInvalidToken})
	}
	cases = append(cases, badRequest{name: "re-enter with another owner", method: http.MethodPost,
		path: "/locks/held", headers: testkit.TokenHeader(s.heldToken), body: `{"owner":"w2","ttl_ms":60000}`,
		status: 400, typ: probInvalidRequest})

	// Renew bodies, with the holder's valid token.
	for _, b := range []struct {
		name, body string
		params     []string
	}{
		{"ttl_ms 0", `{"ttl_ms":0}`, []string{"ttl_ms"}},
		{"ttl_ms -1", `{"ttl_ms":-1}`, []string{"ttl_ms"}},
		{"ttl_ms above max", `{"ttl_ms":600001}`, []string{"ttl_ms"}},
		{"ttl_ms a string", `{"ttl_ms":"5"}`, []string{"ttl_ms"}},
		{"unknown field", `{"ttl":5}`, []string{"ttl"}},
		{"not JSON", `hello`, nil},
		{"trailing data", `{"ttl_ms":1000} {}`, nil},
	} {
		cases = append(cases, badRequest{name: "renew body " + b.name, method: http.MethodPost,
			path: "/locks/held/renew", headers: testkit.TokenHeader(s.heldToken), body: b.body, status: 400,
			typ: probInvalidRequest, params: b.params})
	}

	// Routes.
	return append(cases,
		badRequest{name: "route GET /nope", method: http.MethodGet, path: "/nope", status: 404, typ: probNotFound},
		badRequest{name: "route unescaped slash in name", method: http.MethodGet, path: "/locks/a/b", status: 404, typ: probNotFound},
		badRequest{name: "route renew suffix", method: http.MethodPost, path: "/locks/held/renew/more",
			headers: testkit.TokenHeader(s.heldToken), status: 404, typ: probNotFound},
		badRequest{name: "route PUT /locks/x", method: http.MethodPut, path: "/locks/x", body: okBody,
			status: 405, typ: probMethodNotAllowed},
		badRequest{name: "route PATCH /locks/held", method: http.MethodPatch, path: "/locks/held",
			headers: testkit.TokenHeader(s.heldToken), body: okBody, status: 405, typ: probMethodNotAllowed},
		badRequest{name: "route GET renew", method: http.MethodGet, path: "/locks/held/renew",
			headers: testkit.TokenHeader(s.heldToken), status: 405, typ: probMethodNotAllowed},
		badRequest{name: "route DELETE renew", method: http.MethodDelete, path: "/locks/held/renew",
			headers: testkit.TokenHeader(s.heldToken), status: 405, typ: probMethodNotAllowed},
	)
}

// assertProblem checks r is a problem+json of status and typ with every required member.
func assertProblem(t *testing.T, r *harness.Response, status int, typ string) {
	t.Helper()
	assert.Equal(t, status, r.Status, "body: %s", r.Body)
	if !assert.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json"),
		"Content-Type %q", r.Header.Get("Content-Type")) {
		return
	}
	id := r.Header.Get("X-Request-Id")
	assert.NotEmpty(t, id, "X-Request-Id")
	p := r.JSON()
	assert.Equal(t, typ, p["type"], "body: %s", r.Body)
	assert.NotEmpty(t, p["title"], "title")
	assert.Equal(t, json.Number(strconv.Itoa(r.Status)), p["status"], "status member equals the HTTP status")
	assert.NotEmpty(t, p["detail"], "detail")
	assert.Equal(t, id, p["request_id"], "request_id repeats X-Request-Id")
}

func invalidParamNames(r *harness.Response) []string {
	var p struct {
		InvalidParams []struct{ Name string } `json:"invalid_params"`
	}
	_ = json.Unmarshal(r.Body, &p)
	names := []string{}
	for _, ip := range p.InvalidParams {
		names = append(names, ip.Name)
	}
	return names
}

// assertStillHeld checks the seeded lock "held" is unchanged as its API shows it.
func assertStillHeld(t *testing.T, e *testkit.Env, s seeded) {
	t.Helper()
	r := e.Client.Do(http.MethodGet, "/locks/held", testkit.TokenHeader(s.heldToken), "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	st := r.JSON()
	assert.Equal(t, true, st["held"])
	assert.Equal(t, "w1", st["owner"])
	assert.Equal(t, json.Number("1"), st["holds"])
	assert.Equal(t, json.Number(s.heldFence), st["fence"])
	assert.Equal(t, true, st["yours"])
}

// keyspace renders every key under prefix as its type and contents (not its TTL, which drifts).
func keyspace(t *testing.T, rc *redisConn, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range lines(rc.Do(t, "KEYS", prefix+"*")) {
		typ := rc.Do(t, "TYPE", k)
		var v string
		switch typ {
		case "string":
			v = rc.Do(t, "GET", k)
		case "hash":
			v = sortedPairs(lines(rc.Do(t, "HGETALL", k)))
		case "list":
			v = rc.Do(t, "LRANGE", k, "0", "-1")
		case "set":
			m := lines(rc.Do(t, "SMEMBERS", k))
			sort.Strings(m)
			v = strings.Join(m, "\n")
		case "zset":
			v = rc.Do(t, "ZRANGE", k, "0", "-1", "WITHSCORES")
		case "stream":
			v = rc.Do(t, "XRANGE", k, "-", "+")
		}
		out[k] = typ + ": " + v
	}
	return out
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func sortedPairs(flat []string) string {
	pairs := make([]string, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		pairs = append(pairs, flat[i]+"="+flat[i+1])
	}
	sort.Strings(pairs)
	return strings.Join(pairs, " ")
}

// Token surgery (see also harness.AlterSignature and harness.NoncanonicalSignature).

// alterPayload sets member of the token's payload to v and keeps the original signature.
func alterPayload(token, member string, v any) string {
	p, sig, _ := strings.Cut(token, ".")
	m := decodePayload(p)
	m[member] = v
	b, _ := json.Marshal(m)
	return base64.RawURLEncoding.EncodeToString(b) + "." + sig
}

// forgeToken signs token's payload with secret, as a gateway with that secret would.
func forgeToken(token, secret string) string {
	p, _, _ := strings.Cut(token, ".")
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(p))
	return p + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func decodePayload(p string) map[string]any {
	raw, _ := base64.RawURLEncoding.DecodeString(p)
	m := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	_ = dec.Decode(&m)
	return m
}

// TestValidationBadConfigExits: a bad configuration stops the process at start with a non-zero
// exit and a message naming the variable.
func TestValidationBadConfigExits(t *testing.T) {
	t.Parallel()
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		env     map[string]string
		mention string
	}{
		{"max ttl not a duration", map[string]string{"LEASEGATE_MAX_TTL": "abc"}, "LEASEGATE_MAX_TTL"},
		{"max wait set but empty", map[string]string{"LEASEGATE_MAX_WAIT": ""}, "LEASEGATE_MAX_WAIT"},
		{"default ttl above max ttl", map[string]string{"LEASEGATE_DEFAULT_TTL": "2h", "LEASEGATE_MAX_TTL": "1h"}, "LEASEGATE_DEFAULT_TTL"},
		{"max ttl zero", map[string]string{"LEASEGATE_MAX_TTL": "0s"}, "LEASEGATE_MAX_TTL"},
		{"token secret too short", map[string]string{"LEASEGATE_TOKEN_SECRET": "short"}, "LEASEGATE_TOKEN_SECRET"},
		{"listen not host:port", map[string]string{"LEASEGATE_LISTEN": "nonsense"}, "LEASEGATE_LISTEN"},
		{"redis addr not host:port", map[string]string{"LEASEGATE_REDIS_ADDR": "nonsense"}, "LEASEGATE_REDIS_ADDR"},
		{"key prefix with a brace", map[string]string{"LEASEGATE_KEY_PREFIX": "a{b"}, "LEASEGATE_KEY_PREFIX"},
		{"key prefix with a space", map[string]string{"LEASEGATE_KEY_PREFIX": "my app:"}, "LEASEGATE_KEY_PREFIX"},
		{"key prefix with a tab", map[string]string{"LEASEGATE_KEY_PREFIX": "app\t"}, "LEASEGATE_KEY_PREFIX"},
		{"key prefix with a control character", map[string]string{"LEASEGATE_KEY_PREFIX": "app\x01:"}, "LEASEGATE_KEY_PREFIX"},
		{"log level unknown", map[string]string{"LEASEGATE_LOG_LEVEL": "loud"}, "LEASEGATE_LOG_LEVEL"},
		{"redis url and addr both", map[string]string{"LEASEGATE_REDIS_URL": "redis://127.0.0.1:1", "LEASEGATE_REDIS_ADDR": "127.0.0.1:1"}, "LEASEGATE_REDIS_URL"},
		{"redis url not a redis url", map[string]string{"LEASEGATE_REDIS_URL": "http://x"}, "LEASEGATE_REDIS_URL"},
		{"redis url set but empty", map[string]string{"LEASEGATE_REDIS_URL": ""}, "LEASEGATE_REDIS_URL"},
		{"tls ca without rediss", map[string]string{"LEASEGATE_REDIS_URL": "redis://127.0.0.1:1", "LEASEGATE_REDIS_TLS_CA": "/nonexistent"}, "LEASEGATE_REDIS_TLS_CA"},
		{"tls ca file missing", map[string]string{"LEASEGATE_REDIS_URL": "rediss://127.0.0.1:1", "LEASEGATE_REDIS_TLS_CA": "/nonexistent/ca.pem"}, "LEASEGATE_REDIS_TLS_CA"},
		{"credentials twice", map[string]string{"LEASEGATE_REDIS_URL": "redis://u:p@127.0.0.1:1", "LEASEGATE_REDIS_PASSWORD": "x"}, "LEASEGATE_REDIS_PASSWORD"},
		{"replica acks negative", map[string]string{"LEASEGATE_REPLICA_ACKS": "-1"}, "LEASEGATE_REPLICA_ACKS"},
		{"replica ack timeout zero", map[string]string{"LEASEGATE_REPLICA_ACK_TIMEOUT": "0s"}, "LEASEGATE_REPLICA_ACK_TIMEOUT"},
		{"held quota without auth", map[string]string{"LEASEGATE_QUOTA_HELD": "10"}, "LEASEGATE_QUOTA_HELD"},
		{"held quota negative", map[string]string{"LEASEGATE_QUOTA_HELD": "-1"}, "LEASEGATE_QUOTA_HELD"},
		{"held quota on redlock", map[string]string{"LEASEGATE_QUOTA_HELD": "10", "LEASEGATE_AUTH_FILE": "/nonexistent",
			"LEASEGATE_REDLOCK_URLS": "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3"}, "not offered on RedLock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out bytes.Buffer
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = gatewayEnv("127.0.0.1:1", tc.env)
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			require.NoError(t, ctx.Err(), "the gateway started with a bad configuration; output:\n%s", out.String())
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "want a non-zero exit, got %v; output:\n%s", err, out.String())
			assert.NotZero(t, exit.ExitCode())
			assert.Contains(t, out.String(), tc.mention, "the message names the variable")
		})
	}

	// The base environment the cases start from is itself valid: with LEASEGATE_LISTEN on port 0
	// the gateway serves on a port of the kernel's choosing and exits 0 on SIGTERM.
	t.Run("control: the base configuration serves", func(t *testing.T) {
		r := harness.NewRedis(t, harness.RedisOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = gatewayEnv(r.Addr, nil)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())

		addr := ""
		sc := bufio.NewScanner(stdout)
		for addr == "" && sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				addr = line.Addr
			}
		}
		if addr != "" {
			resp, err := http.Get("http://" + addr + "/healthz")
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				resp.Body.Close()
			}
			assert.NotEqual(t, "127.0.0.1:0", addr, "logs the port it actually listens on")
			assert.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		}
		for sc.Scan() { // drain until the process closes stdout
		}
		err = cmd.Wait()
		require.NotEmpty(t, addr, "no listening line; stderr: %s", stderr.String())
		require.NoError(t, ctx.Err(), "did not stop on SIGTERM")
		assert.NoError(t, err, "stderr: %s", stderr.String())
	})
}

// gatewayEnv is the process environment without any inherited LEASEGATE_ variable, plus a
// valid base configuration and extra.
func gatewayEnv(redisAddr string, extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEGATE_") {
			env = append(env, kv)
		}
	}
	base := map[string]string{
		"LEASEGATE_LISTEN":       "127.0.0.1:0",
		"LEASEGATE_REDIS_ADDR":   redisAddr,
		"LEASEGATE_TOKEN_SECRET": harness.TestTokenSecret,
		"LEASEGATE_KEY_PREFIX":   harness.RandomPrefix(),
	}
	if _, ok := extra["LEASEGATE_REDIS_URL"]; ok { // the two are exclusive
		delete(base, "LEASEGATE_REDIS_ADDR")
	}
	for k, v := range extra {
		base[k] = v
	}
	for k, v := range base {
		env = append(env, k+"="+v)
	}
	return env
}

// TestNewUserMessages checks the answers a new user meets first: 405 says what is allowed, a bad
// lock name is shown as sent and says what names may contain, a missing owner is required, and a
// token from a gateway with another secret says so.
func TestNewUserMessages(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	for path, allow := range map[string]string{"/locks/x": "GET, POST, DELETE", "/locks/x/renew": "POST"} {
		r := e.Client.Do(http.MethodPut, path, nil, "")
		assert.Equal(t, http.StatusMethodNotAllowed, r.Status)
		assert.Equal(t, allow, r.Header.Get("Allow"), path)
	}
	r := e.Client.Do(http.MethodPost, "/locks/caf%C3%A9", nil, testkit.AcquireBody("w", 1000))
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Contains(t, r.Str("detail"), `"café"`)
	assert.Contains(t, r.Str("detail"), `'é' (U+00E9)`)
	assert.Contains(t, r.Str("detail"), "may contain only")
	r = e.Client.Do(http.MethodPost, "/locks/x", nil, `{}`)
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Contains(t, string(r.Body), "owner is required")

	other := harness.NewGateway(t, e.GatewayOptions("", map[string]string{"LEASEGATE_TOKEN_SECRET": "another-secret-0123456789"}))
	g := harness.NewClient(t, other.URL).Do(http.MethodPost, "/locks/y", nil, testkit.AcquireBody("w", 60000))
	require.Equal(t, http.StatusCreated, g.Status)
	r = e.Client.Do(http.MethodDelete, "/locks/y", testkit.TokenHeader(g.Str("token")), "")
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Contains(t, r.Str("detail"), "signed with another secret")
	assert.False(t, strings.HasPrefix(r.Str("detail"), "invalid lease token"), "the title says it: %s", r.Body)
}

// TestLeaseTokenInTheWrongHeader: a lease token sent as "Authorization: Bearer" (as an API key
// would be) is refused with a detail that names the Lease-Token header, on every call that takes
// one; and nothing reaches Redis.
func TestLeaseTokenInTheWrongHeader(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "counts script calls on one Redis server")
	e := testkit.NewEnv(t, nil)
	g := e.Hold(t, e.Client, "bearer", "w", 60000)
	bearer := harness.Headers{"Authorization": "Bearer " + g.Str("token")}
	ran := monitorScripts(t, e.Redis).during(t, func() {
		for _, c := range []struct{ method, path string }{
			{http.MethodDelete, "/locks/bearer"},
			{http.MethodPost, "/locks/bearer/renew"},
			{http.MethodDelete, "/semaphores/bearer"},
			{http.MethodDelete, "/multilocks"},
		} {
			r := e.Client.Do(c.method, c.path, bearer, "")
			require.Equal(t, http.StatusBadRequest, r.Status, "%s %s: %s", c.method, c.path, r.Body)
			assert.Equal(t, "urn:leasegate:problem:invalid-lease-token", r.Str("type"), "the type stays")
			assert.Contains(t, r.Str("detail"), "Lease-Token header", "%s %s", c.method, c.path)
			assert.Contains(t, r.Str("detail"), "Authorization: Bearer header carries an API key or JWT", "%s %s", c.method, c.path)
			assert.Equal(t, []string{"Lease-Token"}, invalidParamNames(r), "%s %s", c.method, c.path)
		}
		r := e.Client.Do(http.MethodDelete, "/locks/bearer", nil, "")
		require.Equal(t, http.StatusBadRequest, r.Status)
		assert.Equal(t, "this call needs the lease's token in the Lease-Token header, and the request has none", r.Str("detail"))
	})
	assert.Empty(t, ran, "a refused request ran a script")
	assert.True(t, e.Held("bearer"))
}
