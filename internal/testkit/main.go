package testkit

import (
	"fmt"
	"os"
	"testing"

	"github.com/leasegate/leasegate/internal/harness"
)

// Main is the TestMain of each black-box test package: it builds the gateway binary once for the
// package's test process (harness.GatewayBinary), exiting at once if the build fails, then runs
// the tests.
func Main(m *testing.M) {
	if _, err := harness.GatewayBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
