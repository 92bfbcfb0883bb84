// Package sharedlocks tests the locks several leases hold at once, read-write locks and
// semaphores, across two gateway replicas on one Redis, and Redisson's lock, read-write lock and
// semaphore test suites ported to HTTP.
package sharedlocks

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
