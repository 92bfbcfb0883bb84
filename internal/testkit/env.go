// Package testkit is what the black-box test packages under tests/ share: a test's world (Env: its
// own Redis deployment, a gateway on it and a validating client; Pair; SecuredEnv), the request
// bodies they send, polling helpers and readers of Redis's and the gateway's counters. Processes
// are started by harness; a helper that only one test package uses stays in that package.
package testkit

import (
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// Deployment is the Redis deployment the black-box suite runs on: LEASEGATE_TEST_REDIS =
// standalone (the default), sentinel, cluster or tls (TLS only, as an ACL user). docs/development.md has
// the command for the whole matrix.
var Deployment = os.Getenv("LEASEGATE_TEST_REDIS")

// Redis starts t's Redis deployment. It returns the server tests may poke directly (the
// standalone server; Sentinel's master; a Cluster's first master, where keys of other slots answer
// MOVED) and gateway options pointing at the deployment.
func Redis(t *testing.T) (*harness.Redis, harness.GatewayOptions) {
	t.Helper()
	switch Deployment {
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
		t.Fatalf("LEASEGATE_TEST_REDIS=%q: want standalone, sentinel, cluster or tls", Deployment)
		return nil, harness.GatewayOptions{}
	}
}

// StandaloneOnly skips t outside the standalone deployment, saying why: tests that restart or
// stall the one Redis, or read its keys directly.
func StandaloneOnly(t *testing.T, why string) {
	t.Helper()
	if Deployment != "" && Deployment != "standalone" {
		t.Skipf("standalone Redis only (LEASEGATE_TEST_REDIS=%s): %s", Deployment, why)
	}
}

// Env is one test's world: its own redis-server, one gateway on it, and a validating client.
type Env struct {
	Redis   *harness.Redis
	Gateway *harness.Gateway
	Client  *harness.Client
	Deploy  harness.GatewayOptions // the Redis deployment's gateway options (see Redis)
}

// NewEnv starts t's Redis deployment and a gateway on it with gwEnv added to its environment;
// both stop when t ends.
func NewEnv(t *testing.T, gwEnv map[string]string) *Env {
	t.Helper()
	r, deploy := Redis(t)
	gw := harness.NewGateway(t, WithEnv(deploy, "", gwEnv))
	return &Env{Redis: r, Gateway: gw, Client: harness.NewClient(t, gw.URL), Deploy: deploy}
}

// GatewayOptions returns options for another gateway on e's Redis deployment.
func (e *Env) GatewayOptions(keyPrefix string, gwEnv map[string]string) harness.GatewayOptions {
	return WithEnv(e.Deploy, keyPrefix, gwEnv)
}

// WithEnv returns the deployment's gateway options o with a key prefix and more environment.
func WithEnv(o harness.GatewayOptions, keyPrefix string, gwEnv map[string]string) harness.GatewayOptions {
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

// Hold acquires lock (try-once) and returns the grant.
func (e *Env) Hold(t *testing.T, c *harness.Client, lock, owner string, ttlMs int64) *harness.Response {
	t.Helper()
	r := c.Do(http.MethodPost, "/locks/"+lock, nil, AcquireBody(owner, ttlMs))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	return r
}

// Held reports whether lock is held, asking e's gateway.
func (e *Env) Held(lock string) bool {
	return e.Client.Do(http.MethodGet, "/locks/"+lock, nil, "").JSON()["held"] == true
}

// Waiters is how many waiters e's gateway reports for lock.
func (e *Env) Waiters(t *testing.T, lock string) int64 {
	return e.Client.Do(http.MethodGet, "/locks/"+lock, nil, "").Int("waiters")
}
