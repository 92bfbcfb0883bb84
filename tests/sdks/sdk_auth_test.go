package sdks

import (
	"context"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// TestGoSDKAuthAPIKeyAndCAFile: WithAPIKey and WithCAFile against an HTTPS gateway that
// authenticates. The key goes with every request, the events stream of a kept-alive lease
// included (a force release reaches Done through it); without it the gateway answers 401
// (ErrUnauthenticated), a name outside the principal's prefixes 403 (ErrForbidden), and without
// the CA file the certificate is not trusted.
func TestGoSDKAuthAPIKeyAndCAFile(t *testing.T) {
	t.Parallel()
	e := testkit.NewSecuredEnv(t)
	ctx := context.Background()
	name := "sdk-auth"

	anonymous, err := leasegate.New(e.Gateway.URL, leasegate.WithCAFile(e.CAFile))
	require.NoError(t, err)
	_, err = anonymous.Lock(ctx, name, leasegate.LockOptions{Owner: "nobody"})
	require.ErrorIs(t, err, leasegate.ErrUnauthenticated)
	assert.Contains(t, err.Error(), "Authorization: Bearer", "the message has the problem's detail")

	untrusting, err := leasegate.New(e.Gateway.URL, leasegate.WithAPIKey(e.Principals["ops"].Key))
	require.NoError(t, err)
	_, err = untrusting.Lock(ctx, name, leasegate.LockOptions{Owner: "nobody"})
	var unknownCA x509.UnknownAuthorityError
	require.ErrorAs(t, err, &unknownCA, "%v", err)

	gw, err := leasegate.New(e.Gateway.URL, leasegate.WithAPIKey(e.Principals["ops"].Key), leasegate.WithCAFile(e.CAFile))
	require.NoError(t, err)
	lease, err := gw.Lock(ctx, name, leasegate.LockOptions{Owner: "sdk", TTL: 30 * time.Second})
	require.NoError(t, err)
	st, err := gw.Inspect(ctx, name, lease.Token)
	require.NoError(t, err)
	require.NotNil(t, st.Yours)
	assert.True(t, *st.Yours)
	require.NoError(t, lease.Renew(ctx, 0))
	lease.KeepAlive() // and watch its events stream, which opens only with the key
	harness.Eventually(t, 5*time.Second, "the events stream opened", lease.Watching)
	sent := time.Now()
	r := e.Client.Do(http.MethodDelete, "/locks/"+name+"?force=true", e.As("ops"), "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	waitDone(t, lease.Done(), sent, 5*time.Second, "force release")
	assert.ErrorIs(t, lease.Err(), leasegate.ErrLeaseForced)

	again, err := gw.Lock(ctx, name, leasegate.LockOptions{Owner: "sdk"})
	require.NoError(t, err)
	released, err := again.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	assert.False(t, e.Held(t, name))

	billing, err := leasegate.New(e.Gateway.URL, leasegate.WithAPIKey(e.Principals["billing"].Key), leasegate.WithCAFile(e.CAFile))
	require.NoError(t, err)
	_, err = billing.Lock(ctx, "orders."+name, leasegate.LockOptions{Owner: "sdk"})
	require.ErrorIs(t, err, leasegate.ErrForbidden)
	var p *leasegate.ProblemError
	require.ErrorAs(t, err, &p)
	require.NotNil(t, p.Name)
	assert.Equal(t, "orders."+name, *p.Name)
}

// TestGoSDKAuthOptionErrors: New refuses a CA file without a certificate and a key that no header
// can carry; an empty key sends none.
func TestGoSDKAuthOptionErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600))
	for _, opt := range []leasegate.ClientOption{
		leasegate.WithCAFile(notPEM),
		leasegate.WithCAFile(filepath.Join(dir, "missing.crt")),
		leasegate.WithAPIKey("lgk_abc\n"),
	} {
		_, err := leasegate.New("https://127.0.0.1:1", opt)
		assert.Error(t, err)
	}
	_, err := leasegate.New("http://127.0.0.1:1", leasegate.WithAPIKey(""))
	assert.NoError(t, err)
}

// TestTypeScriptSDKAuth runs sdk/typescript/test/auth.test.mjs against an HTTPS gateway that
// authenticates: the client's apiKey goes with every request (its events stream included), 401
// and 403 become UnauthenticatedError and ForbiddenError, and Node trusts the private CA through
// NODE_EXTRA_CA_CERTS. The SDK is compiled into a directory of the test's own, so that this
// test runs beside TestTypeScriptSDK, whose `npm run build` replaces dist/.
func TestTypeScriptSDKAuth(t *testing.T) {
	t.Parallel()
	dir := typescriptSDKDir(t)
	e := testkit.NewSecuredEnv(t)

	out := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(out, "node_modules")))
	ctx, cancel := context.WithTimeout(context.Background(), npmTimeout)
	defer cancel()
	tsc := exec.CommandContext(ctx, "node", filepath.Join(dir, "node_modules", "typescript", "bin", "tsc"),
		"-p", filepath.Join(dir, "tsconfig.json"), "--outDir", filepath.Join(out, "dist"), "--declaration", "false")
	if b, err := tsc.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, b)
	}

	node := exec.CommandContext(ctx, "node", "--test", filepath.Join(dir, "test", "auth.test.mjs"))
	node.Dir = dir
	node.Env = append(os.Environ(), "NO_COLOR=1",
		"LEASEGATE_SDK_MODULE="+filepath.Join(out, "dist", "index.js"),
		"LEASEGATE_AUTH_URL="+e.Gateway.URL,
		"LEASEGATE_API_KEY="+e.Principals["ops"].Key,
		"LEASEGATE_LIMITED_API_KEY="+e.Principals["billing"].Key,
		"NODE_EXTRA_CA_CERTS="+e.CAFile)
	b, err := node.CombinedOutput()
	s := summary(string(b))
	if err != nil || !strings.Contains(s, "fail 0") || !strings.Contains(s, "skipped 0") {
		t.Fatalf("node --test test/auth.test.mjs: %v (%s)\n%s", err, s, b)
	}
	t.Logf("node:test: %s", s)
}
