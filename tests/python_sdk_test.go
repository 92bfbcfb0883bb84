package tests

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

	"github.com/leasegate/leasegate/tests/harness"
)

// The Python SDK (sdk/python/leasegate.py) is one standard-library-only module. TestPythonSDK
// runs its unittest suite (sdk/python/tests) against a gateway of its own; the suite includes
// the check that the module imports nothing outside the standard library.

// pythonTimeout bounds the unittest run (it takes a few seconds).
const pythonTimeout = 2 * time.Minute

func TestPythonSDK(t *testing.T) {
	t.Parallel()
	python := debianTool(t, "python3", "python3")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	version, err := exec.Command(python, "-c", "import sys; print(sys.version_info >= (3, 11))").Output()
	if err != nil || strings.TrimSpace(string(version)) != "True" {
		t.Fatalf("the Python SDK needs Python 3.11 or later; %s says %q (%v)", python, version, err)
	}
	e := newEnv(t, nil)

	ctx, cancel := context.WithTimeout(context.Background(), pythonTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", filepath.Join("sdk", "python", "tests"), "-v")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "LEASEGATE_URL="+e.gw.URL, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
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
	// A clean run ends "Ran N tests in Xs\n\nOK"; "OK (skipped=1)" would mean LEASEGATE_URL was lost.
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests? in `).FindSubmatch(out)
	if ran == nil || string(ran[1]) == "0" || !regexp.MustCompile(`(?m)^OK$`).Match(out) {
		t.Fatalf("python3 -m unittest exited 0 but is not a clean run of at least one test:\n%s", out)
	}
	t.Logf("python unittest: %s tests passed in %s", ran[1], time.Since(start).Round(time.Millisecond))
}
