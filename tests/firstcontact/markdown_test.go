package firstcontact

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/leasegate/leasegate/internal/harness"
)

// block is one fenced code block of a Markdown file.
type block struct {
	Lang, Code string
	Line       int // of the opening fence, 1-based
	Name       string
}

var (
	markerLine = regexp.MustCompile(`^<!-- test: ([a-z0-9-]+) -->$`)
	fenceLine  = regexp.MustCompile("^(```+)([A-Za-z0-9_-]*)\\s*$")
)

// parseBlocks returns the fenced blocks of a Markdown text, each named by the test marker on the
// line before its fence (if any), and the lines outside any block (the prose, "" in the blocks'
// place, so that line numbers keep).
func parseBlocks(text string) (blocks []block, prose []string) {
	lines := strings.Split(text, "\n")
	name := ""
	for i := 0; i < len(lines); i++ {
		m := fenceLine.FindStringSubmatch(lines[i])
		if m == nil {
			prose = append(prose, lines[i])
			if s := markerLine.FindStringSubmatch(lines[i]); s != nil {
				name = s[1]
			} else if strings.TrimSpace(lines[i]) != "" {
				name = ""
			}
			continue
		}
		b := block{Lang: m[2], Line: i + 1, Name: name}
		name = ""
		prose = append(prose, "")
		var code []string
		for i++; i < len(lines) && strings.TrimRight(lines[i], " ") != m[1]; i++ {
			code = append(code, lines[i])
			prose = append(prose, "")
		}
		prose = append(prose, "")
		b.Code = strings.Join(code, "\n") + "\n"
		blocks = append(blocks, b)
	}
	return blocks, prose
}

// repoRoot is the module root: the repository's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// namedBlocks returns the blocks named name in the repository file rel, in order, failing t when
// there are none.
func namedBlocks(t *testing.T, rel, name string) []block {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := parseBlocks(string(text))
	var out []block
	for _, b := range all {
		if b.Name == name {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no block marked <!-- test: %s -->", rel, name)
	}
	return out
}

// sameRecipe returns the blocks named name in each of files, failing t unless every file has the
// same blocks: a recipe documented in two places is run once, so the two must not drift apart.
func sameRecipe(t *testing.T, name string, files ...string) []block {
	t.Helper()
	first := namedBlocks(t, files[0], name)
	for _, f := range files[1:] {
		other := namedBlocks(t, f, name)
		if len(other) != len(first) {
			t.Fatalf("%s has %d blocks %q, %s has %d: they must be the same recipe", files[0], len(first), name, f, len(other))
		}
		for i := range first {
			if other[i].Code != first[i].Code {
				t.Fatalf("block %q differs between %s:%d and %s:%d: they must be the same recipe\n%s\n---\n%s",
					name, files[0], first[i].Line, f, other[i].Line, first[i].Code, other[i].Code)
			}
		}
	}
	return first
}

// TestReadmeIsOnePage keeps README.md a page a newcomer reads: what leasegate is, the two commands,
// the quick start and the map of docs/.
func TestReadmeIsOnePage(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep it at most 250 and move the rest to a page of docs/", n)
	}
	for _, cmd := range []string{"./scripts/run", "./scripts/test"} {
		if !strings.Contains(string(text), cmd) {
			t.Errorf("README.md does not name %s", cmd)
		}
	}
}

// docFiles are the Markdown files whose links TestDocsLinks checks, relative to the root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "sdk/go/README.md", "sdk/typescript/README.md", "sdk/python/README.md", "deploy/prometheus/README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(more) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	for _, f := range more {
		files = append(files, filepath.Join("docs", filepath.Base(f)))
	}
	return files
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// TestDocsLinks checks every relative link of the documentation: the file it names exists, and
// the anchor, if any, is a heading of that file (as GitHub makes anchors of headings). Moving a
// section from one page to another breaks the links into it; this finds them.
func TestDocsLinks(t *testing.T) {
	root := repoRoot(t)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		text, err := os.ReadFile(filepath.Join(root, rel))
		a := map[string]bool{}
		if err == nil {
			a = headingAnchors(string(text))
		}
		anchors[rel] = a
		return a
	}
	for _, rel := range docFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		_, prose := parseBlocks(string(text))
		for i, line := range prose {
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := rel
				if path != "" {
					file = filepath.Join(filepath.Dir(rel), path)
					if _, err := os.Stat(filepath.Join(root, file)); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", rel, i+1, target, file)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel, i+1, target)
					continue
				}
				if !anchorsOf(file)[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", rel, i+1, target, file, anchor)
				}
			}
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown text: the heading's
// text without Markdown, lower case, without punctuation but hyphens and underscores, spaces made
// hyphens; a repeated one gets -1, -2...
func headingAnchors(text string) map[string]bool {
	_, prose := parseBlocks(text)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		title := mdLink.ReplaceAllStringFunc(m[1], func(l string) string { return l[strings.Index(l, "[")+1 : strings.Index(l, "]")] })
		title = strings.ReplaceAll(title, "`", "")
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r) || r == '_' || r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func TestHeadingAnchors(t *testing.T) {
	for _, tc := range []struct{ heading, anchor string }{
		{"## Waiting (long-poll)", "waiting-long-poll"},
		{"### Counting held leases (`LEASEGATE_QUOTA_HELD`, 2026-11-23)", "counting-held-leases-leasegate_quota_held-2026-11-23"},
		{"## Operations metrics and the hot path (issues #11 and #16, 2026-11-23)", "operations-metrics-and-the-hot-path-issues-11-and-16-2026-11-23"},
		{"## Keep-alive and `lease.signal`", "keep-alive-and-leasesignal"},
		{"## RedLock: five masters beside one Redis (issue #15, 2026-11-23)", "redlock-five-masters-beside-one-redis-issue-15-2026-11-23"},
		{"## See [the API](api.md)", "see-the-api"},
	} {
		if got := headingAnchors(tc.heading); !got[tc.anchor] {
			t.Errorf("%q: anchors %v, want %q", tc.heading, got, tc.anchor)
		}
	}
	if got := headingAnchors("# A\n\n## A\n"); !got["a"] || !got["a-1"] {
		t.Errorf("a repeated heading: anchors %v, want a and a-1", got)
	}
}

func TestParseBlocks(t *testing.T) {
	text := "intro\n<!-- test: one -->\n```sh\necho 1\n```\n\n<!-- test: two -->\n\n```go\nx\n```\n" +
		"<!-- test: one -->\ntext between\n```sh\nno\n```\n````md\n```\n# not a heading\n````\n# a heading\n"
	blocks, prose := parseBlocks(text)
	want := []block{
		{Lang: "sh", Code: "echo 1\n", Line: 3, Name: "one"},
		{Lang: "go", Code: "x\n", Line: 9, Name: "two"},
		{Lang: "sh", Code: "no\n", Line: 14, Name: ""},
		{Lang: "md", Code: "```\n# not a heading\n", Line: 17, Name: ""},
	}
	if len(blocks) != len(want) {
		t.Fatalf("blocks %+v, want %+v", blocks, want)
	}
	for i := range want {
		if blocks[i] != want[i] {
			t.Errorf("block %d: %+v, want %+v", i, blocks[i], want[i])
		}
	}
	if a := headingAnchors(text); len(a) != 1 || !a["a-heading"] {
		t.Errorf("anchors %v, want only a-heading", a)
	}
	if len(prose) != strings.Count(text, "\n")+1 {
		t.Errorf("prose has %d lines, the text %d", len(prose), strings.Count(text, "\n")+1)
	}
}
