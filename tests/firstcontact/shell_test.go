package firstcontact

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/testkit"
)

// scriptTimeout bounds one run of documented blocks: a build, an npm ci and a program or two.
const scriptTimeout = 4 * time.Minute

// freshClone copies the repository as a clone of it would have it (the files git tracks, and
// new ones it does not ignore, without node_modules) into a new directory of t's, and returns it.
// A recipe run there cannot lean on anything built or installed in the working tree.
func freshClone(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s (the tests copy the repository as a clone has it): %v", root, err)
	}
	dst := filepath.Join(t.TempDir(), "leasegate")
	copied := 0
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if rel == "" || strings.Contains("/"+rel+"/", "/node_modules/") {
			continue
		}
		from, to := filepath.Join(root, rel), filepath.Join(dst, rel)
		info, err := os.Lstat(from)
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in git
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			link, err := os.Readlink(from)
			if err == nil {
				err = os.Symlink(link, to)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := copyFile(from, to, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		copied++
	}
	if copied == 0 {
		t.Fatalf("git ls-files listed nothing in %s", root)
	}
	return dst
}

func copyFile(from, to string, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// offlineEnv is the environment documented blocks run in: the test's, without LEASEGATE_*
// variables (a developer's own must not leak in), PYTHONPATH and the Go variables that loosen
// checksum checks, with a TMPDIR of t's (what a block makes with mktemp goes when t ends), no Go
// module proxy or toolchain download (the checksum database stays on, unreachable without the
// proxy: a recipe must bring its checksums), and npm offline; plus vars.
func offlineEnv(t *testing.T, vars ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "LEASEGATE_"), strings.HasPrefix(strings.ToLower(k), "npm_config_"):
			continue
		case k == "PYTHONPATH", k == "TMPDIR", k == "GOPROXY", k == "GOFLAGS", k == "GOTOOLCHAIN", k == "GOSUMDB",
			k == "GONOSUMDB", k == "GONOSUMCHECK", k == "GOPRIVATE", k == "GOINSECURE":
			continue
		}
		env = append(env, kv)
	}
	// -trimpath: the copy's packages are found in the build cache that scripts/test's build of the
	// gateway (also -trimpath) filled, instead of being compiled again because their directory is
	// new. What the recipes build and run is the same.
	env = append(env, "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"))
	env = append(env, "TMPDIR="+t.TempDir(), "GOPROXY=off", "GOTOOLCHAIN=local",
		"npm_config_offline=true", "npm_config_audit=false", "npm_config_fund=false",
		"npm_config_update_notifier=false", "NO_COLOR=1", "PYTHONDONTWRITEBYTECODE=1")
	return append(env, vars...)
}

// blockMark starts each block's output in runBlocks' combined output.
var blockMark = regexp.MustCompile(`(?m)^@@firstcontact block (\d+)@@\n`)

// runBlocks runs blocks in order in one bash -euo pipefail in dir (so that what one sets, the next
// sees, as in a reader's terminal), then after, if not empty. It fails t unless all exit 0, and
// returns each block's output (stdout and stderr), after's last.
func runBlocks(t *testing.T, dir string, env []string, blocks []block, after string) []string {
	t.Helper()
	var script strings.Builder
	for i, b := range blocks {
		fmt.Fprintf(&script, "printf '\\n@@firstcontact block %d@@\\n'\n%s", i, b.Code)
	}
	if after != "" {
		fmt.Fprintf(&script, "printf '\\n@@firstcontact block %d@@\\n'\n%s\n", len(blocks), after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script.String())
	cmd.Dir, cmd.Env = dir, env
	var out testkit.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s (process group killed): %w", scriptTimeout, err)
	}
	text := out.String()
	if err != nil {
		hint := ""
		if strings.Contains(text, "ENOTCACHED") {
			hint = "\n(npm's cache lacks a package the recipe installs offline: run `npm ci --prefix sdk/typescript` once with the registry in reach; ./scripts/test does)"
		}
		t.Fatalf("the blocks failed: %v%s\n--- script:\n%s\n--- output:\n%s", err, hint, script.String(), text)
	}
	t.Logf("%d blocks ran in %s; their output:\n%s", len(blocks), time.Since(start).Round(time.Millisecond), text)
	outputs := make([]string, len(blocks)+1)
	marks := blockMark.FindAllStringSubmatchIndex(text, -1)
	for i, m := range marks {
		end := len(text)
		if i+1 < len(marks) {
			end = marks[i+1][0]
		}
		n, err := strconv.Atoi(text[m[2]:m[3]])
		if err != nil || n >= len(outputs) {
			t.Fatalf("a block printed a line like runBlocks' marks: %q", text[m[0]:m[1]])
		}
		outputs[n] = text[m[1]:end]
	}
	if after == "" {
		outputs = outputs[:len(blocks)]
	}
	return outputs
}

// requireMatch fails t unless out matches each of the regular expressions.
func requireMatch(t *testing.T, what, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("%s: output does not match %s:\n%s", what, p, out)
		}
	}
}
