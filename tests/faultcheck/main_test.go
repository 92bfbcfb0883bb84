// Package faultcheck runs the fault checker (docs/faultcheck.md): a workload on gateway
// replicas while a deployment's faults are injected, then a check of the whole history.
package faultcheck

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
