// Package sdks tests the Go, TypeScript and Python SDKs end to end against real gateways.
package sdks

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
