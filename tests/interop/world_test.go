// Package interop tests the locks the gateway shares with Redisson's own clients
// (LEASEGATE_REDISSON_LOCKS, LEASEGATE_REDISSON_RWLOCKS; docs/redisson.md): a Redisson-protocol
// client written in Go (internal/redisson: Java Redisson's scripts, channels and watchdog) and
// node-redisson, a third-party client from npm, against gateways on the same real Redis
// (standalone, Sentinel with LEASEGATE_TEST_REDIS=sentinel, and Cluster).
package interop

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/redisson"
	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The prefixes the gateways of these tests share with Redisson.
const (
	lockPrefix   = "rs."
	rwlockPrefix = "rw."
)

// world is one test's Redis deployment, a gateway sharing the rs. and rw. names with Redisson,
// and the rueidis client options Redisson clients use to reach the deployment.
type world struct {
	*testkit.Env
	redis   rueidis.ClientOption
	sharded bool                // Redisson 3.22+ on a Cluster: SSUBSCRIBE and SPUBLISH
	rig     *harness.ClusterRig // newClusterWorld's
}

// sharedEnv is the gateway environment that shares the rs. and rw. prefixes.
var sharedEnv = map[string]string{"LEASEGATE_REDISSON_LOCKS": lockPrefix, "LEASEGATE_REDISSON_RWLOCKS": rwlockPrefix}

// newWorld starts t's Redis deployment (LEASEGATE_TEST_REDIS) and a gateway sharing names with
// Redisson on it.
func newWorld(t *testing.T) *world {
	t.Helper()
	e := testkit.NewEnv(t, sharedEnv)
	return worldOn(t, e)
}

// newClusterWorld starts a Redis Cluster and a gateway sharing names with Redisson on it, whatever
// LEASEGATE_TEST_REDIS says.
func newClusterWorld(t *testing.T) *world {
	t.Helper()
	rig := harness.NewClusterRig(t, harness.ClusterOptions{})
	deploy := harness.GatewayOptions{RedisURL: rig.URL()}
	gw := harness.NewGateway(t, testkit.WithEnv(deploy, "", sharedEnv))
	e := &testkit.Env{Redis: rig.Masters()[0], Gateway: gw, Client: harness.NewClient(t, gw.URL), Deploy: deploy}
	w := worldOn(t, e)
	w.rig = rig
	return w
}

func worldOn(t *testing.T, e *testkit.Env) *world {
	t.Helper()
	w := &world{Env: e}
	if e.Deploy.RedisURL != "" {
		o, err := rueidis.ParseURL(e.Deploy.RedisURL)
		require.NoError(t, err)
		w.redis = o
		w.sharded = !strings.Contains(e.Deploy.RedisURL, "master_set=") && strings.Contains(e.Deploy.RedisURL, "addr=") // a Cluster's seeds (ClusterRig.URL)
	} else {
		w.redis = rueidis.ClientOption{InitAddress: []string{e.Redis.Addr}, ForceSingleClient: true}
	}
	w.redis.DisableCache = true
	return w
}

// jvm returns a Redisson instance ("a JVM") with a connection of its own, closed when t ends;
// on a Cluster it uses sharded pub/sub, as Redisson 3.22+ does, unless classic is set.
func (w *world) jvm(t *testing.T, opts redisson.Options, classic ...bool) *redisson.Client {
	t.Helper()
	rc, err := rueidis.NewClient(w.redis)
	require.NoError(t, err)
	opts.Sharded = w.sharded && len(classic) == 0
	c := redisson.New(rc, opts)
	t.Cleanup(func() {
		c.Close()
		rc.Close()
	})
	return c
}

// acquire sends POST /locks/{name} with body and returns the response.
func (w *world) acquire(name, body string) *harness.Response {
	return w.Client.Do(http.MethodPost, "/locks/"+name, nil, body)
}

// release gives back the lease of grant g.
func (w *world) release(t *testing.T, name string, g *harness.Response) {
	t.Helper()
	r := w.Client.Do(http.MethodDelete, "/locks/"+name, testkit.TokenHeader(g.Str("token")), "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
}

// state reads GET /locks/{name}.
func (w *world) state(t *testing.T, name string) map[string]any {
	t.Helper()
	r := w.Client.Do(http.MethodGet, "/locks/"+name, nil, "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	return r.JSON()
}

// within fails t unless d is at most limit, naming what took d.
func within(t *testing.T, d, limit time.Duration, what string) {
	t.Helper()
	require.LessOrEqual(t, d, limit, "%s took %v", what, d)
}
