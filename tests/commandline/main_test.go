// Package commandline tests the leasegate command line (run, acquire, release, renew,
// inspect) against real gateways, and README's scripts/run.
package commandline

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
