package operations

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// The example alerting rules (deploy/prometheus/leasegate-alerts.yml) are validated by promtool
// and unit-tested by it against deploy/prometheus/leasegate-alerts.test.yml. promtool comes with
// Debian's prometheus package, which ./scripts/test installs when it is missing.

// promtoolTimeout bounds one promtool run (each takes well under a second).
const promtoolTimeout = time.Minute

func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	promtool := testkit.DebianTool(t, "prometheus", "promtool")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	dir := filepath.Join(root, "deploy", "prometheus")

	t.Run("check rules", func(t *testing.T) {
		runPromtool(t, promtool, dir, "check", "rules", "leasegate-alerts.yml")
	})
	t.Run("test rules", func(t *testing.T) {
		runPromtool(t, promtool, dir, "test", "rules", "leasegate-alerts.test.yml")
	})
	t.Run("every alert has unit tests", func(t *testing.T) {
		rules, err := os.ReadFile(filepath.Join(dir, "leasegate-alerts.yml"))
		if err != nil {
			t.Fatal(err)
		}
		tests, err := os.ReadFile(filepath.Join(dir, "leasegate-alerts.test.yml"))
		if err != nil {
			t.Fatal(err)
		}
		alerts := regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)\s*$`).FindAllSubmatch(rules, -1)
		if len(alerts) == 0 {
			t.Fatal("leasegate-alerts.yml defines no alert")
		}
		for _, a := range alerts {
			name := regexp.QuoteMeta(string(a[1]))
			if !regexp.MustCompile(`(?m)^\s*alertname:\s*` + name + `\s*$`).Match(tests) {
				t.Errorf("alert %s has no alert_rule_test in leasegate-alerts.test.yml", a[1])
			}
		}
	})
}

// runPromtool runs promtool with args in dir and fails t with promtool's output unless it exits 0
// and reports SUCCESS.
func runPromtool(t *testing.T, promtool, dir string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), promtoolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s: %w", promtoolTimeout, err)
	}
	if err != nil {
		t.Fatalf("promtool %v failed: %v\n%s", args, err, out)
	}
	if !regexp.MustCompile(`(?m)^\s*SUCCESS\b`).Match(out) {
		t.Fatalf("promtool %v exited 0 without reporting SUCCESS:\n%s", args, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}
