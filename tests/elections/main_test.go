// Package elections tests leader election through the HTTP API: campaigns, the leader's value,
// proclaims, resignations and lapses, FIFO among candidates, hand-over time, the observers'
// resumable stream (across a gateway killed mid-run), token kinds and authentication, each on a
// Redis deployment of its own (testkit.Env; LEASEGATE_TEST_REDIS picks standalone, sentinel or
// cluster).
package elections

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
