// Package operations tests what operators use: the admin API, force release, live events,
// metrics and their example alerting rules, the access log and the dashboard.
package operations

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
