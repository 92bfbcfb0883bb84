package deployments

import (
	"bytes"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// Self-tests of the harness's deployment rigs (Sentinel, Cluster, TLS with an ACL user). They
// use the rigs, redis-cli and rueidis.ParseURL only: no gateway.

// redisCLI runs redis-cli with args and returns its output, trimmed; redis-cli reports a Redis
// error reply on stdout with exit status 0, so callers check the text.
func redisCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	require.NoError(t, err, "redis-cli %v: %s", args, out)
	return string(bytes.TrimSpace(out))
}

func TestSentinelRigFailsOver(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rig := harness.NewSentinelRig(t, harness.SentinelOptions{MasterSet: "rig"})
	t.Logf("sentinel rig up in %v", time.Since(start))

	opt, err := rueidis.ParseURL(rig.URL())
	require.NoError(t, err)
	assert.Equal(t, rig.SentinelAddrs(), opt.InitAddress)
	assert.Equal(t, "rig", opt.Sentinel.MasterSet)

	master := rig.Master()
	role, err := master.Role()
	require.NoError(t, err)
	require.Equal(t, "master", role)
	replicas := rig.Replicas()
	require.Len(t, replicas, 2)
	for _, r := range replicas {
		role, err := r.Role()
		require.NoError(t, err)
		assert.Equal(t, "slave", role, r.Addr)
	}
	sentinel := rig.Sentinels()[0]
	assert.Equal(t, "127.0.0.1\n"+strconv.Itoa(master.Port),
		redisCLI(t, "-p", strconv.Itoa(sentinel.Port), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "rig"))

	master.MustDo(t, "SET", "k", "before failover")
	require.NoError(t, rig.WaitReplicated(5*time.Second))
	for _, r := range replicas {
		assert.Equal(t, "before failover", r.MustDo(t, "GET", "k"), r.Addr)
	}

	require.NoError(t, rig.KillMaster())
	start = time.Now()
	addr, err := rig.AwaitFailover(10 * time.Second)
	require.NoError(t, err)
	t.Logf("failover from %s to %s in %v", master.Addr, addr, time.Since(start))
	require.NotEqual(t, master.Addr, addr)
	newMaster := rig.Master()
	require.Equal(t, addr, newMaster.Addr)
	assert.Equal(t, "before failover", newMaster.MustDo(t, "GET", "k"))
	require.Equal(t, "OK", newMaster.MustDo(t, "SET", "k", "after failover"))

	// The other replica follows the new master.
	start = time.Now()
	require.NoError(t, rig.WaitReplicated(10*time.Second))
	t.Logf("remaining replica in sync %v later", time.Since(start))
	rest := rig.Replicas()
	require.Len(t, rest, 1)
	assert.Equal(t, "after failover", rest[0].MustDo(t, "GET", "k"))
}

func TestClusterRigServesSlots(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rig := harness.NewClusterRig(t, harness.ClusterOptions{})
	t.Logf("cluster rig up in %v", time.Since(start))

	opt, err := rueidis.ParseURL(rig.URL())
	require.NoError(t, err)
	assert.Equal(t, rig.SeedAddrs(), opt.InitAddress)
	require.Len(t, rig.Masters(), 3)

	// KeySlot agrees with the server, hash tags included.
	seed := rig.Nodes()[0]
	for _, k := range []string{"", "a", "foo", "lock:{orders}", "{user1000}.following", "x{}y", "{}{a}", "{a}{b}", "a{b", "a}b{c}"} {
		assert.Equal(t, seed.MustDo(t, "CLUSTER", "KEYSLOT", k), strconv.Itoa(harness.KeySlot(k)), "key %q", k)
	}
	assert.Equal(t, harness.KeySlot("orders"), harness.KeySlot("lock:{orders}"))

	// redis-cli -c follows MOVED from any node; the value lives on the node NodeForKey names.
	port := strconv.Itoa(seed.Port)
	for _, k := range []string{"a", "b", "c", "{x}1"} {
		assert.Equal(t, "OK", redisCLI(t, "-c", "-p", port, "SET", k, "v-"+k))
		assert.Equal(t, "v-"+k, redisCLI(t, "-c", "-p", port, "GET", k))
		assert.Equal(t, "v-"+k, rig.NodeForKey(k).MustDo(t, "GET", k))
	}

	// Moving a slot takes its keys along; its old owner then redirects.
	slot := harness.KeySlot("a")
	from := rig.NodeForSlot(slot)
	var to *harness.Redis
	for _, m := range rig.Masters() {
		if m != from {
			to = m
			break
		}
	}
	start = time.Now()
	require.NoError(t, rig.MigrateSlot(slot, from, to))
	t.Logf("slot %d moved from %s to %s in %v", slot, from.Addr, to.Addr, time.Since(start))
	require.Equal(t, to, rig.NodeForSlot(slot))
	assert.Equal(t, "v-a", to.MustDo(t, "GET", "a"))
	_, err = from.Do("GET", "a")
	assert.ErrorContains(t, err, "MOVED "+strconv.Itoa(slot)+" "+to.Addr)
	assert.Equal(t, "v-a", redisCLI(t, "-c", "-p", port, "GET", "a"))
}

func TestClusterRigFailsOver(t *testing.T) {
	t.Parallel()
	rig := harness.NewClusterRig(t, harness.ClusterOptions{})
	master := rig.NodeForKey("k")
	require.Equal(t, "OK", master.MustDo(t, "SET", "k", "before failover"))
	require.NoError(t, rig.WaitReplicated(5*time.Second))

	require.NoError(t, rig.KillMaster(master.Addr))
	start := time.Now()
	addr, err := rig.AwaitFailover(15 * time.Second)
	require.NoError(t, err)
	t.Logf("failover from %s to %s in %v", master.Addr, addr, time.Since(start))
	newMaster := rig.NodeForKey("k")
	require.Equal(t, addr, newMaster.Addr)
	assert.Equal(t, "before failover", newMaster.MustDo(t, "GET", "k"))
	masters := rig.Masters()
	assert.Len(t, masters, 3)
	for _, n := range rig.Nodes() {
		if n.Running() && !slices.Contains(masters, n) {
			assert.Error(t, rig.KillMaster(n.Addr), "%s is a replica", n.Addr)
		}
	}
}

func TestTLSRigRequiresItsACLUser(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rig := harness.NewTLSRedis(t, harness.TLSOptions{})
	t.Logf("tls rig up in %v", time.Since(start))

	opt, err := rueidis.ParseURL(rig.URL())
	require.NoError(t, err)
	assert.Equal(t, []string{rig.Addr}, opt.InitAddress)
	assert.Equal(t, "gate", opt.Username)
	assert.Equal(t, rig.Password(), opt.Password)
	assert.NotNil(t, opt.TLSConfig)

	// The harness's own TLS client, as the ACL user.
	assert.Equal(t, "PONG", rig.MustDo(t, "PING"))
	assert.Equal(t, "gate", rig.MustDo(t, "ACL", "WHOAMI"))
	_, err = rig.DoAs("", "", "PING")
	assert.ErrorContains(t, err, "NOAUTH")
	_, err = rig.DoAs("default", "anything", "PING")
	assert.ErrorContains(t, err, "WRONGPASS")
	_, err = rig.DoAs("gate", "wrong", "PING")
	assert.ErrorContains(t, err, "WRONGPASS")

	// redis-cli trusting the CA file: PONG as the ACL user only; no answer without TLS.
	port := strconv.Itoa(rig.Port)
	tlsArgs := []string{"--tls", "--cacert", rig.CAFile(), "-h", "127.0.0.1", "-p", port}
	assert.Equal(t, "PONG", redisCLI(t, append(tlsArgs, "--user", rig.Username(), "--pass", rig.Password(), "--no-auth-warning", "PING")...))
	assert.Contains(t, redisCLI(t, append(tlsArgs, "PING")...), "NOAUTH")
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", port, "PING").CombinedOutput()
	assert.NotContains(t, string(out), "PONG")
	t.Logf("plain-text PING: %v %s", err, bytes.TrimSpace(out))
}
