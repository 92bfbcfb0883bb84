// Package locks tests exclusive locks and multi-locks through the HTTP API: grants, re-entry,
// fences, expiry, renewal, waiting and hand-off, the watchdog, idempotent retries and grants
// nobody received, each on a Redis deployment of its own (testkit.Env).
package locks

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
