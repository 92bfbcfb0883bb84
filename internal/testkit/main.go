package testkit

import (
	"fmt"
	"os"
	"testing"

	"github.com/leasegate/leasegate/internal/harness"
)

// Main is the TestMain of each black-box test package: it builds the gateway binary once for the
// package's test process (harness.GatewayBinary), exiting at once if the build fails, runs the
// tests, and removes the binary.
func Main(m *testing.M) {
	_, err := harness.GatewayBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = harness.RemoveGatewayBinary()
		os.Exit(1)
	}
	code := m.Run()
	if err := harness.RemoveGatewayBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}
