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

// The TypeScript SDK (sdk/typescript) is an npm package generated from openapi.yaml. These tests
// run its npm scripts: its end-to-end suite against a real gateway, the check that the committed
// generated types match openapi.yaml, and the spec linter. They need node, npm and the package's
// dependencies (npm ci --prefix sdk/typescript).

// npmTimeout bounds one npm script run: the end-to-end suite (tsc, then the tests) takes about a
// minute here, and over three with a core kept busy by another process.
const npmTimeout = 5 * time.Minute

// typescriptSDKDir returns sdk/typescript, failing t when node, npm or its node_modules are missing.
func typescriptSDKDir(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	dir := filepath.Join(root, "sdk", "typescript")
	const fix = "run `npm ci --prefix sdk/typescript` in the module root (README's test command does)"
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found on PATH (%v): install Node.js 20 and npm, then %s", tool, err, fix)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil || !fi.IsDir() {
		t.Fatalf("%s has no node_modules: %s", dir, fix)
	}
	return dir
}

// runNPM runs `npm run <script>` in dir with env added, bounded by npmTimeout; on timeout it
// kills the whole process group (npm, its shell and node). It returns the combined output.
func runNPM(t *testing.T, dir string, env map[string]string, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), npmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "run", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0", "npm_config_update_notifier=false")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out testkit.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s (process group killed): %w", npmTimeout, err)
	}
	t.Logf("npm run %s: %v after %s", script, exitStatus(err), time.Since(start).Round(time.Millisecond))
	return out.String(), err
}

func exitStatus(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// summary returns node:test's closing counts ("# tests 8", "# pass 8", ...) from out.
func summary(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		for _, k := range []string{"# tests ", "# pass ", "# fail ", "# cancelled ", "# skipped "} {
			if strings.HasPrefix(l, k) {
				lines = append(lines, strings.TrimPrefix(l, "# "))
			}
		}
	}
	return strings.Join(lines, ", ")
}

// TestTypeScriptSDK runs the SDK's end-to-end suite (npm test: build, type-check, node --test)
// against a gateway of its own.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	dir := typescriptSDKDir(t)
	e := testkit.NewEnv(t, nil)
	out, err := runNPM(t, dir, map[string]string{"LEASEGATE_URL": e.Gateway.URL}, "test")
	if err != nil {
		t.Fatalf("npm test in %s failed: %v\n%s", dir, err, out)
	}
	s := summary(out)
	if !strings.Contains(s, "pass ") || !strings.Contains(s, "fail 0") || strings.Contains(s, "tests 0") {
		t.Fatalf("npm test passed but its summary is not a clean run (%q):\n%s", s, out)
	}
	t.Logf("node:test: %s", s)
	// How soon onLost fired after a force release (the tests' diagnostics).
	for _, m := range regexp.MustCompile(`# ((?:[a-z-]+: )?onLost fired [^\n]*)`).FindAllStringSubmatch(out, -1) {
		t.Logf("typescript lost signal, %s", m[1])
	}
}

// TestTypeScriptSDKIsGenerated checks that sdk/typescript/src/schema.d.ts is what
// `npm run generate` makes from openapi.yaml now.
func TestTypeScriptSDKIsGenerated(t *testing.T) {
	t.Parallel()
	dir := typescriptSDKDir(t)
	if out, err := runNPM(t, dir, nil, "check-generated"); err != nil {
		t.Fatalf("npm run check-generated failed: %v\n%s", err, out)
	}
}

// TestOpenAPISpecLints lints openapi.yaml with Redocly's recommended rules.
func TestOpenAPISpecLints(t *testing.T) {
	t.Parallel()
	dir := typescriptSDKDir(t)
	if out, err := runNPM(t, dir, nil, "lint:spec"); err != nil {
		t.Fatalf("npm run lint:spec failed: %v\n%s", err, out)
	}
}
