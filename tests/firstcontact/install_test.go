package firstcontact

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

// Each test below runs an install recipe of docs/clients.md in a fresh copy of the repository
// (LEASEGATE, as the recipes name the clone), then the program of that client's README against a
// gateway of its own. Recipes written in two places must be the same (sameRecipe).

// TestCLIInstall builds the command line as docs/clients.md says and asks the gateway through it.
func TestCLIInstall(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	clone := freshClone(t)
	blocks := namedBlocks(t, "docs/clients.md", "cli-install")
	out := runBlocks(t, t.TempDir(), offlineEnv(t, "LEASEGATE="+clone, "LEASEGATE_SERVER="+e.Gateway.URL), blocks, "")
	requireMatch(t, "leasegate inspect", strings.Join(out, ""), `\{"lock":"deploy","held":false`)
}

// TestGoSDKInstall runs the Go SDK's install recipe in a new module with no module proxy (so no
// checksum lookup either), then builds and runs sdk/go/README.md's program.
func TestGoSDKInstall(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	clone := freshClone(t)
	recipe := sameRecipe(t, "go-install", "docs/clients.md", "sdk/go/README.md")
	program := namedBlocks(t, "sdk/go/README.md", "go-example")
	app := t.TempDir()
	env := offlineEnv(t, "LEASEGATE="+clone, "LEASEGATE_SERVER="+e.Gateway.URL)
	modInit := exec.Command("go", "mod", "init", "example.com/app")
	modInit.Dir, modInit.Env = app, env
	if msg, err := modInit.CombinedOutput(); err != nil {
		t.Fatalf("go mod init: %v\n%s", err, msg)
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(program[0].Code), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runBlocks(t, app, env, recipe, "go run .")
	requireMatch(t, "the program", out[len(out)-1], `(?m)^report written under fence \d+$`)
	mod, err := os.ReadFile(filepath.Join(app, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	requireMatch(t, "go.mod", string(mod), `replace github.com/leasegate/leasegate/sdk/go => `+clone+`/sdk/go`)
	if e.Held("nightly-report") {
		t.Error("the program left nightly-report held")
	}
}

// TestTypeScriptSDKInstall runs the TypeScript SDK's install recipe with npm offline (npm ci from
// npm's cache, which installing the SDK's packages for the tests filled), then
// sdk/typescript/README.md's program with node.
func TestTypeScriptSDKInstall(t *testing.T) {
	t.Parallel()
	testkit.DebianTool(t, "nodejs", "node")
	testkit.DebianTool(t, "npm", "npm")
	e := testkit.NewEnv(t, nil)
	clone := freshClone(t)
	recipe := sameRecipe(t, "typescript-install", "docs/clients.md", "sdk/typescript/README.md")
	program := namedBlocks(t, "sdk/typescript/README.md", "typescript-example")
	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "package.json"), []byte(`{"name": "app", "version": "1.0.0", "private": true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "app.mjs"), []byte(program[0].Code), 0o644); err != nil {
		t.Fatal(err)
	}
	// npm ci reads npm's cache (under HOME), which `npm ci --prefix sdk/typescript` filled.
	out := runBlocks(t, app, offlineEnv(t, "LEASEGATE="+clone, "LEASEGATE_SERVER="+e.Gateway.URL), recipe, "node app.mjs")
	requireMatch(t, "the program", out[len(out)-1], `(?m)^holding nightly-report with fence \d+$`)
	if e.Held("nightly-report") {
		t.Error("the program left nightly-report held")
	}
}

// TestPythonSDKInstall runs each of the Python SDK's two install recipes (copy the module, or put
// its directory on PYTHONPATH) in a directory of its own, then sdk/python/README.md's program.
func TestPythonSDKInstall(t *testing.T) {
	t.Parallel()
	python := testkit.DebianTool(t, "python3", "python3")
	e := testkit.NewEnv(t, nil)
	clone := freshClone(t)
	program := namedBlocks(t, "sdk/python/README.md", "python-example")
	for _, name := range []string{"python-install-copy", "python-install-path"} {
		t.Run(name, func(t *testing.T) {
			recipe := sameRecipe(t, name, "docs/clients.md", "sdk/python/README.md")
			app := t.TempDir()
			if err := os.WriteFile(filepath.Join(app, "app.py"), []byte(program[0].Code), 0o644); err != nil {
				t.Fatal(err)
			}
			out := runBlocks(t, app, offlineEnv(t, "LEASEGATE="+clone, "LEASEGATE_SERVER="+e.Gateway.URL), recipe, python+" app.py")
			requireMatch(t, "the program", out[len(out)-1], `(?m)^holding nightly-report with fence \d+$`)
			if e.Held("nightly-report") {
				t.Error("the program left nightly-report held")
			}
		})
	}
}
