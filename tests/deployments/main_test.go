// Package deployments tests the gateway on Sentinel, on a Cluster and on RedLock masters,
// grants with replica acknowledgements, and the harness's deployment rigs themselves; its
// benchmarks compare the deployments (docs/performance.md).
package deployments

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
