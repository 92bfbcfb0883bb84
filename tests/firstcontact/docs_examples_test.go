package firstcontact

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

// transcriptDocs are the pages whose transcripts (console blocks marked <!-- test: transcript -->)
// TestDocsTranscripts replays.
var transcriptDocs = []string{"docs/api.md", "docs/waiting.md", "docs/lock-kinds.md", "docs/elections.md", "docs/operations.md"}

// TestDocsTranscripts replays every transcript of transcriptDocs against one gateway on a real
// redis-server, with curl and jq as the pages use them, and checks that each command prints what
// its block shows, in shape (shapeChecker). The transcripts run one after the other: a background
// command is known to be in line when the gateway's count of waiting requests grows.
//
// With LEASEGATE_DOCS_REWRITE=1 it writes what the commands printed into the blocks instead
// (tokens shortened to "…"), for a change that changes the answers on purpose; read the diff.
func TestDocsTranscripts(t *testing.T) {
	t.Parallel()
	testkit.DebianTool(t, "curl", "curl")
	testkit.DebianTool(t, "jq", "jq")
	e := testkit.NewEnv(t, nil)
	hostPort := strings.TrimPrefix(e.Gateway.URL, "http://")
	waiting := func() int64 {
		var n int64
		for _, list := range []struct{ path, field, count string }{
			{"/locks?limit=1000", "locks", "waiters"},
			{"/semaphores?limit=1000", "semaphores", "waiters"},
			{"/elections?limit=1000", "elections", "candidates"},
		} {
			r := e.Client.Do(http.MethodGet, list.path, nil, "")
			entries, _ := r.JSON()[list.field].([]any)
			for _, entry := range entries {
				c, _ := entry.(map[string]any)[list.count].(json.Number)
				v, _ := c.Int64()
				n += v
			}
		}
		return n
	}
	rewrite := os.Getenv("LEASEGATE_DOCS_REWRITE") == "1"
	root := repoRoot(t)
	for _, rel := range transcriptDocs {
		text, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		all, _ := parseBlocks(string(text))
		type replayed struct {
			steps   []transcriptStep
			outputs []string
		}
		var done []replayed
		for _, b := range all {
			if b.Name != "transcript" {
				continue
			}
			steps, err := parseTranscript(rel, b)
			if err != nil {
				t.Fatal(err)
			}
			t.Run(fmt.Sprintf("%s:%d", filepath.Base(rel), b.Line), func(t *testing.T) {
				outputs := replayTranscript(t, steps, offlineEnv(t), hostPort, waiting, !rewrite)
				done = append(done, replayed{steps, outputs})
			})
		}
		if len(done) == 0 && !t.Failed() {
			t.Errorf("%s has no block marked <!-- test: transcript -->", rel)
		}
		if rewrite && !t.Failed() {
			out := string(text)
			for i := len(done) - 1; i >= 0; i-- {
				out = rewriteTranscript(out, done[i].steps, done[i].outputs)
			}
			if err := os.WriteFile(filepath.Join(root, rel), []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote the transcripts of %s", rel)
		}
	}
}
