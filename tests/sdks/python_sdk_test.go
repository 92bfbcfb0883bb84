package sdks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// The Python SDK (sdk/python/leasegate.py) is one standard-library-only module. TestPythonSDK
// runs its unittest suite (sdk/python/tests) against a gateway of its own, and, for its
// api_key and ca_file options (test_auth.py), a second gateway on the same Redis that
// authenticates (an auth file of testkit.Principals, LEASEGATE_QUOTA_PARKED 1) and serves HTTPS
// with a certificate of a test CA; the suite includes the check that the module imports nothing
// outside the standard library.

// pythonTimeout bounds the unittest run (it takes a few seconds).
const pythonTimeout = 2 * time.Minute

func TestPythonSDK(t *testing.T) {
	t.Parallel()
	python := testkit.DebianTool(t, "python3", "python3")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	version, err := exec.Command(python, "-c", "import sys; print(sys.version_info >= (3, 11))").Output()
	if err != nil || strings.TrimSpace(string(version)) != "True" {
		t.Fatalf("the Python SDK needs Python 3.11 or later; %s says %q (%v)", python, version, err)
	}
	e := testkit.NewEnv(t, nil)
	secured := newPythonSecuredGateway(t, e)

	ctx, cancel := context.WithTimeout(context.Background(), pythonTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", filepath.Join("sdk", "python", "tests"), "-v")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "LEASEGATE_URL="+e.Gateway.URL, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	cmd.Env = append(cmd.Env, secured...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s (process group killed): %w", pythonTimeout, err)
	}
	if err != nil {
		t.Fatalf("python3 -m unittest failed: %v\n%s", err, out)
	}
	// A clean run ends "Ran N tests in Xs\n\nOK"; "OK (skipped=1)" would mean LEASEGATE_URL was lost
	// (test_auth.py fails rather than skips without its variables).
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests? in `).FindSubmatch(out)
	if ran == nil || string(ran[1]) == "0" || !regexp.MustCompile(`(?m)^OK$`).Match(out) {
		t.Fatalf("python3 -m unittest exited 0 but is not a clean run of at least one test:\n%s", out)
	}
	// A background thread (keep-alive, events stream) that died of an exception is a bug even when
	// every test passed.
	if strings.Contains(string(out), "Exception in thread") {
		t.Errorf("an SDK thread died of an exception:\n%s", out)
	}
	t.Logf("python unittest: %s tests passed in %s", ran[1], time.Since(start).Round(time.Millisecond))
	// How soon lease.lost turned true after a force release (test_e2e.assert_lost_at_once).
	for _, m := range regexp.MustCompile(`LOST-LATENCY ([^\n]*)`).FindAllSubmatch(out, -1) {
		t.Logf("python lost signal, %s", m[1])
	}
}

// newPythonSecuredGateway starts a gateway on e's Redis deployment that authenticates (an auth
// file of testkit.Principals, at most one parked waiting request per principal) and serves HTTPS
// with a certificate of a fresh test CA. It returns the environment test_auth.py reads:
// LEASEGATE_TLS_URL, LEASEGATE_TLS_CA_FILE (the CA that signed the gateway's certificate),
// LEASEGATE_TLS_OTHER_CA_FILE (a CA that did not) and LEASEGATE_KEY_<PRINCIPAL> (each
// principal's API key; "billing-2" is LEASEGATE_KEY_BILLING_2).
func newPythonSecuredGateway(t *testing.T, e *testkit.Env) []string {
	t.Helper()
	dir := t.TempDir()
	ca, pair, err := harness.WriteServerCertificates(dir)
	if err != nil {
		t.Fatalf("test CA: %v", err)
	}
	other, err := harness.NewCA(t.TempDir())
	if err != nil {
		t.Fatalf("other CA: %v", err)
	}
	ps := testkit.Principals()
	authPath := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authPath, testkit.AuthFile(ps), 0o600); err != nil {
		t.Fatalf("auth file: %v", err)
	}
	opts := e.GatewayOptions("", map[string]string{"LEASEGATE_AUTH_FILE": authPath, "LEASEGATE_QUOTA_PARKED": "1"})
	opts.TLS = &harness.GatewayTLS{CertFile: pair.CertFile, KeyFile: pair.KeyFile, RootCAs: ca.Pool}
	gw := harness.NewGateway(t, opts)
	if !strings.HasPrefix(gw.URL, "https://") {
		t.Fatalf("the secured gateway serves %s, not HTTPS", gw.URL)
	}
	vars := []string{"LEASEGATE_TLS_URL=" + gw.URL, "LEASEGATE_TLS_CA_FILE=" + ca.File, "LEASEGATE_TLS_OTHER_CA_FILE=" + other.File}
	for name, p := range ps {
		vars = append(vars, "LEASEGATE_KEY_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))+"="+p.Key)
	}
	return vars
}
