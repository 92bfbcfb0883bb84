package firstcontact

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

// TestReadmeQuickStart runs README's quick start as a reader does after `./scripts/run`: in a
// fresh copy of the repository, every block marked quickstart in order, in one shell. The
// gateway is the test's own (on a free port, with a Redis of its own), named by LEASEGATE_SERVER,
// which the README honours; Go has no module proxy.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	clone := freshClone(t)
	blocks := namedBlocks(t, "README.md", "quickstart")
	if len(blocks) != 4 {
		t.Fatalf("README.md has %d quickstart blocks; this test checks 4 (the CLI and the address, curl, leasegate run, Go)", len(blocks))
	}
	out := runBlocks(t, clone, offlineEnv(t, "LEASEGATE_SERVER="+e.Gateway.URL), blocks, "")

	if _, err := os.Stat(filepath.Join(clone, "bin", "leasegate")); err != nil {
		t.Errorf("the first block built no bin/leasegate: %v\n%s", err, out[0])
	}
	requireMatch(t, "curl", out[1],
		`"lock":"deploy","owner":"me","token":"[^"]+","fence":\d+,"ttl_ms":60000`, // the grant
		`\{"lock":"deploy","held":true,"mode":"exclusive","owner":"me"`,           // inspected
		`"lock":"deploy","owner":"me","token":"[^"]+","fence":\d+,"ttl_ms":60000`, // renewed
		`\{"lock":"deploy","released":true,"holds":0`)                             // released
	requireMatch(t, "leasegate run", out[2], `(?m)^deploying with fence \d+$`)
	requireMatch(t, "the Go SDK", out[3], `(?m)^holding deploy with fence \d+$`)
	if e.Held("deploy") {
		t.Error("the lock deploy is still held after the quick start")
	}
}
