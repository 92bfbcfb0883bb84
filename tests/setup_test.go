package tests

import (
	"fmt"
	"os"
	"testing"

	"github.com/leasegate/leasegate/tests/harness"
)

func TestMain(m *testing.M) {
	if _, err := harness.GatewayBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// env is one test's world: its own redis-server, one gateway on it, and a validating client.
type env struct {
	redis  *harness.Redis
	gw     *harness.Gateway
	client *harness.Client
}

func newEnv(t *testing.T, gwEnv map[string]string) *env {
	t.Helper()
	r := harness.NewRedis(t, harness.RedisOptions{})
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: r, Env: gwEnv})
	return &env{redis: r, gw: gw, client: harness.NewClient(t, gw.URL)}
}

// acquireBody renders an acquire request body.
func acquireBody(owner string, ttlMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d}`, owner, ttlMs)
}

func tokenHeader(token string) harness.Headers { return harness.Headers{"Lease-Token": token} }
