package tests

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
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
	deploy harness.GatewayOptions // the Redis deployment's gateway options (see testRedis)
}

// gatewayOptions returns options for another gateway on e's Redis deployment.
func (e *env) gatewayOptions(keyPrefix string, gwEnv map[string]string) harness.GatewayOptions {
	return withEnv(e.deploy, keyPrefix, gwEnv)
}

// withEnv returns the deployment's gateway options o with a key prefix and more environment.
func withEnv(o harness.GatewayOptions, keyPrefix string, gwEnv map[string]string) harness.GatewayOptions {
	env := map[string]string{}
	for k, v := range o.Env {
		env[k] = v
	}
	for k, v := range gwEnv {
		env[k] = v
	}
	o.KeyPrefix, o.Env = keyPrefix, env
	return o
}

func newEnv(t *testing.T, gwEnv map[string]string) *env {
	t.Helper()
	r, deploy := testRedis(t)
	gw := harness.NewGateway(t, withEnv(deploy, "", gwEnv))
	return &env{redis: r, gw: gw, client: harness.NewClient(t, gw.URL), deploy: deploy}
}

// testDeployment is the Redis deployment the black-box suite runs on: LEASEGATE_TEST_REDIS =
// standalone (the default), sentinel, cluster or tls (TLS only, as an ACL user). README has the
// command for the whole matrix.
var testDeployment = os.Getenv("LEASEGATE_TEST_REDIS")

// testRedis starts t's Redis deployment. It returns the server tests may poke directly (the
// standalone server; Sentinel's master; a Cluster's first master, where keys of other slots answer
// MOVED) and gateway options pointing at the deployment.
func testRedis(t *testing.T) (*harness.Redis, harness.GatewayOptions) {
	t.Helper()
	switch testDeployment {
	case "", "standalone":
		r := harness.NewRedis(t, harness.RedisOptions{})
		return r, harness.GatewayOptions{Redis: r}
	case "sentinel":
		rig := harness.NewSentinelRig(t, harness.SentinelOptions{})
		return rig.Master(), harness.GatewayOptions{RedisURL: rig.URL()}
	case "cluster":
		rig := harness.NewClusterRig(t, harness.ClusterOptions{})
		return rig.Masters()[0], harness.GatewayOptions{RedisURL: rig.URL()}
	case "tls":
		r := harness.NewTLSRedis(t, harness.TLSOptions{})
		return r.Redis, harness.GatewayOptions{RedisURL: r.URL(), Env: map[string]string{"LEASEGATE_REDIS_TLS_CA": r.CAFile()}}
	default:
		t.Fatalf("LEASEGATE_TEST_REDIS=%q: want standalone, sentinel, cluster or tls", testDeployment)
		return nil, harness.GatewayOptions{}
	}
}

// standaloneOnly skips t outside the standalone deployment, saying why: tests that restart or
// stall the one Redis, or read its keys directly.
func standaloneOnly(t *testing.T, why string) {
	t.Helper()
	if testDeployment != "" && testDeployment != "standalone" {
		t.Skipf("standalone Redis only (LEASEGATE_TEST_REDIS=%s): %s", testDeployment, why)
	}
}

// acquireBody renders an acquire request body.
func acquireBody(owner string, ttlMs int64) string {
	return fmt.Sprintf(`{"owner":%q,"ttl_ms":%d}`, owner, ttlMs)
}

func tokenHeader(token string) harness.Headers { return harness.Headers{"Lease-Token": token} }

// debianTool returns the path of the first of names on PATH, failing t (never skipping) when none
// is there, with the Debian package that provides it: ./scripts/test installs those.
func debianTool(t *testing.T, pkg string, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("%s not found on PATH: install Debian's %s package (./scripts/test does)", names[0], pkg)
	return ""
}

// eventuallyPaced is eventually polling every 50 ms: for conditions that send a request to the
// gateway, which a 5 ms poll would flood.
func eventuallyPaced(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-time.After(50 * time.Millisecond)
	}
}
