package security

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestTLSRedisWithAnACLUser: the gateway speaks TLS to a Redis that accepts nothing else, trusting
// a private CA (LEASEGATE_REDIS_TLS_CA), as an ACL user (the default user is disabled there), with
// the credentials in the URL or in LEASEGATE_REDIS_USERNAME/PASSWORD.
func TestTLSRedisWithAnACLUser(t *testing.T) {
	t.Parallel()
	r := harness.NewTLSRedis(t, harness.TLSOptions{})
	plain := "rediss://" + r.Addr
	for name, env := range map[string]map[string]string{
		"credentials in the URL": {"LEASEGATE_REDIS_URL": r.URL(), "LEASEGATE_REDIS_TLS_CA": r.CAFile()},
		"credentials apart": {"LEASEGATE_REDIS_URL": plain, "LEASEGATE_REDIS_TLS_CA": r.CAFile(),
			"LEASEGATE_REDIS_USERNAME": r.Username(), "LEASEGATE_REDIS_PASSWORD": r.Password()},
	} {
		gw := harness.NewGateway(t, harness.GatewayOptions{Env: env})
		c := harness.NewClient(t, gw.URL)
		require.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/readyz", nil, "").Status, name)
		g := c.Do(http.MethodPost, "/locks/tls", nil, testkit.AcquireBody("secure", 60000))
		require.Equal(t, http.StatusCreated, g.Status, "%s: %s", name, g.Body)
		ch := make(chan *harness.Response, 1)
		go func() {
			ch <- c.Do(http.MethodPost, "/locks/tls", nil, `{"owner":"next","ttl_ms":60000,"wait_ms":10000}`)
		}()
		harness.Eventually(t, 5*time.Second, "a waiter queued", func() bool {
			return c.Do(http.MethodGet, "/locks/tls", nil, "").Int("waiters") == 1
		})
		require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/tls", testkit.TokenHeader(g.Str("token")), "").Status, name)
		n := testkit.Receive(t, ch, 10*time.Second, "the waiter's grant over TLS")
		require.Equal(t, http.StatusCreated, n.Status, "%s: %s", name, n.Body)
		require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/tls", testkit.TokenHeader(n.Str("token")), "").Status, name)
		owner, err := r.Do("HGET", gw.KeyPrefix+"{tls}", ":owner")
		require.NoError(t, err)
		assert.Empty(t, owner, "%s: released", name)
	}

	// Without the CA the server's certificate is not trusted: the gateway starts but is not ready.
	gw := harness.NewGateway(t, harness.GatewayOptions{Env: map[string]string{"LEASEGATE_REDIS_URL": r.URL()}})
	c := harness.NewClient(t, gw.URL)
	assert.Equal(t, http.StatusServiceUnavailable, c.Do(http.MethodGet, "/readyz", nil, "").Status)
	harness.Eventually(t, 5*time.Second, "the TLS failure logged", func() bool {
		return strings.Contains(gw.Logs(), "certificate")
	})
}

// TestClusterNodeAloneIsRefusedAtStart: a Redis Cluster is given by its seeds; a gateway given
// one Cluster node's address as a standalone Redis (where keys of other slots would answer MOVED)
// exits at start saying how to configure it.
func TestClusterNodeAloneIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	rig := harness.NewClusterRig(t, harness.ClusterOptions{})
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)
	for name, env := range map[string]map[string]string{
		"url":  {"LEASEGATE_REDIS_URL": "redis://" + rig.SeedAddrs()[0]},
		"addr": {"LEASEGATE_REDIS_ADDR": rig.SeedAddrs()[0]},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = gatewayEnv(rig.SeedAddrs()[0], env)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		require.NoError(t, ctx.Err(), "%s: the gateway started on one Cluster node; output:\n%s", name, out.String())
		cancel()
		assert.Error(t, err, name)
		assert.Contains(t, out.String(), "give the Cluster's seed addresses", name)
	}
}
