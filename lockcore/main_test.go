package lockcore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every Service the tests
// create is closed (and its rueidis client after it) in t.Cleanup, so a goroutine left behind is
// one that lockcore's Close did not stop. One of rueidis's own is let go: a Cluster client whose
// topology refresh failed sleeps before trying again on a goroutine its Close does not wait for.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}
