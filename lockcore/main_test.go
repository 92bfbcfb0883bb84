package lockcore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every Service the tests
// create is closed (and its rueidis client after it) in t.Cleanup, so a goroutine left behind is
// one that lockcore's Close did not stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
