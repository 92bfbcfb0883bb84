package firstcontact

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Facts the documentation states about the repository itself, checked against it.

// TestDocsListEveryProblemType keeps docs/api.md's table of problem types the gateway's: the same
// types as api/problem.go declares, each with the status openapi.yaml's table gives it.
func TestDocsListEveryProblemType(t *testing.T) {
	root := repoRoot(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	declared := map[string]bool{}
	for _, m := range regexp.MustCompile(`"urn:leasegate:problem:([a-z-]+)"`).FindAllStringSubmatch(read("api/problem.go"), -1) {
		declared[m[1]] = true
	}
	table := func(rel string, row *regexp.Regexp) map[string]string {
		out := map[string]string{}
		for _, m := range row.FindAllStringSubmatch(read(rel), -1) {
			out[m[1]] = m[2]
		}
		if len(out) == 0 {
			t.Fatalf("%s: no table of problem types", rel)
		}
		return out
	}
	spec := table("openapi.yaml", regexp.MustCompile("(?m)^ +\\| `urn:leasegate:problem:([a-z-]+)` \\| (\\d{3}) \\|"))
	doc := table("docs/api.md", regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| (\\d{3}) \\|"))
	for typ := range declared {
		if spec[typ] == "" {
			t.Errorf("openapi.yaml's table of problem types lacks %s, which api/problem.go declares", typ)
		}
		if doc[typ] == "" {
			t.Errorf("docs/api.md's table of problem types lacks %s, which api/problem.go declares", typ)
		}
	}
	for typ, status := range doc {
		if !declared[typ] {
			t.Errorf("docs/api.md lists %s, which api/problem.go does not declare", typ)
		} else if spec[typ] != "" && spec[typ] != status {
			t.Errorf("docs/api.md gives %s the status %s, openapi.yaml %s", typ, status, spec[typ])
		}
	}
	for typ := range spec {
		if !declared[typ] {
			t.Errorf("openapi.yaml lists %s, which api/problem.go does not declare", typ)
		}
	}
}

// TestDocsStateTheFuzzBudget keeps the pages that say how long ./scripts/test fuzzes saying what
// it does.
func TestDocsStateTheFuzzBudget(t *testing.T) {
	root := repoRoot(t)
	script, err := os.ReadFile(filepath.Join(root, "scripts", "test"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`LEASEGATE_FUZZTIME:-(\d+)x\}`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/test: no default LEASEGATE_FUZZTIME of N executions (Nx)")
	}
	n, _ := strconv.Atoi(string(m[1]))
	want := groupThousands(n) + " executions"
	for _, rel := range []string{"docs/api.md", "docs/development.md"} {
		text, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(text)), " "), want) {
			t.Errorf("%s does not say that scripts/test fuzzes each target for %s", rel, want)
		}
	}
}

// groupThousands writes n with commas between groups of three digits, as the pages do.
func groupThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestTypeScriptReadmeNamesItsTarball keeps the tarball the TypeScript SDK's README installs the
// one npm pack writes: <scope>-<name>-<version>.tgz from package.json.
func TestTypeScriptReadmeNamesItsTarball(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "sdk", "typescript", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct{ Name, Version string }
	if err := json.Unmarshal(raw, &pkg); err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(strings.TrimPrefix(pkg.Name, "@"), "/", "-") + "-" + pkg.Version + ".tgz"
	readme, err := os.ReadFile(filepath.Join(root, "sdk", "typescript", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`[a-z-]+-\d+\.\d+\.\d+\.tgz`).FindAllString(string(readme), -1)
	if len(named) == 0 {
		t.Fatalf("sdk/typescript/README.md names no tarball; npm pack writes %s", want)
	}
	for _, n := range named {
		if n != want {
			t.Errorf("sdk/typescript/README.md names %s; npm pack writes %s (package.json)", n, want)
		}
	}
}
