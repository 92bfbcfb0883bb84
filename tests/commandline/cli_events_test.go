package commandline

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestCLIRunStopsTheCommandAtOnceWhenForceReleased: `leasegate run` watches its lease's events
// stream, so a force release stops a long command within milliseconds (its renewal, every 10 s
// with a 30 s TTL, would take seconds to find out), and run exits 76.
func TestCLIRunStopsTheCommandAtOnceWhenForceReleased(t *testing.T) {
	t.Parallel()
	for _, target := range []struct {
		name, force string
		args        []string
		says        string // the loss, said once
	}{
		{"lock", "/locks/nightly", []string{"--lock", "nightly"},
			`lost the lease on lock "nightly": an operator force-released it`},
		{"semaphore", "/semaphores/pool", []string{"--semaphore", "pool", "--permits", "3"},
			`lost the lease on semaphore "pool": an operator force-released it`},
		{"multilock", "/locks/acct.2", []string{"--lock", "acct.1", "--lock", "acct.2"},
			`lost the lease on multi-lock ["acct.1" "acct.2"]: an operator force-released its member "acct.2"`},
	} {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			p := testkit.NewStreamProxy(t, e.Gateway.URL) // to see when run's streams are open
			args := append([]string{"run", "--server", p.Server.URL, "--ttl", "30s"}, target.args...)
			done := e.startCLI(t, append(args, "--", "sleep", "60")...)
			streams := int64(1)
			if target.name == "multilock" {
				streams = 2 // one per member
			}
			harness.Eventually(t, 10*time.Second, "run's events streams to open", func() bool { return p.Opened.Load() == streams })

			sent := time.Now()
			r := e.Client.Do(http.MethodDelete, target.force+"?force=true", nil, "")
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var run cliRun
			select {
			case run = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("run did not stop the command within 10 s of the force release")
			}
			took := time.Since(sent)
			t.Logf("%s: run exited %v after the force release was sent (its sleep 60 stopped by SIGTERM)", target.name, took)
			assert.Less(t, took, 2*time.Second, "stopped at once, not at the next renewal (10 s)")
			assert.Equal(t, 76, run.code, run.stderr)
			assert.Contains(t, run.stderr, "leasegate: "+target.says+"; stopping the command\n")
			assert.Equal(t, 1, strings.Count(run.stderr, "force-released"), "said once:\n%s", run.stderr)
		})
	}
}
