// Package firstcontact tests what a newcomer meets first, as written: README's quick start, run
// block by block in a copy of the repository against a real gateway; the install recipes of the
// command line and the three SDKs (docs/clients.md and each SDK's README), run with no module
// proxy and npm offline, each followed by its README's complete program; the curl transcripts of
// docs/ (transcript_test.go), replayed against a real gateway, their output checked in shape; and
// every relative link and anchor of the documentation.
//
// Runnable blocks are marked in the Markdown by an HTML comment on the line before their fence,
// `<!-- test: NAME -->`; blocks of one name run in order, in one bash (-euo pipefail).
package firstcontact

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
