package operations

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

// TestAccessLogPolicy: by default only error answers (but not 409) get an access log line;
// LEASEGATE_ACCESS_LOG=all logs every request, off none.
func TestAccessLogPolicy(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	all := harness.NewGateway(t, e.GatewayOptions("", map[string]string{"LEASEGATE_ACCESS_LOG": "all"}))
	off := harness.NewGateway(t, e.GatewayOptions("", map[string]string{"LEASEGATE_ACCESS_LOG": "off"}))
	for _, gw := range []*harness.Gateway{e.Gateway, all, off} {
		c := harness.NewClient(t, gw.URL)
		require.Equal(t, http.StatusCreated, c.Do(http.MethodPost, "/locks/log.ok", nil, testkit.AcquireBody("w1", 30000)).Status)
		require.Equal(t, http.StatusConflict, c.Do(http.MethodPost, "/locks/log.ok", nil, testkit.AcquireBody("w2", 30000)).Status)
		require.Equal(t, http.StatusBadRequest, c.Do(http.MethodPost, "/locks/log.bad", nil, `{"owner":""}`).Status)
		require.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/locks/log.ok", nil, "").Status)
	}
	lines := func(gw *harness.Gateway) (statuses []string) {
		for _, l := range strings.Split(gw.Logs(), "\n") {
			if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"path":"/locks/log.`) {
				_, st, _ := strings.Cut(l, `"status":`)
				statuses = append(statuses, st[:3])
			}
		}
		return statuses
	}
	harness.Eventually(t, 5*time.Second, "the logs written", func() bool { return len(lines(all)) >= 4 })
	assert.Equal(t, []string{"400"}, lines(e.Gateway), "default: errors but not 409")
	assert.ElementsMatch(t, []string{"201", "409", "400", "200"}, lines(all))
	assert.Empty(t, lines(off))
}
