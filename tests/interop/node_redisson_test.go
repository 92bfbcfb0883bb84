package interop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// nodeRedisson is a node-redisson client (npm, a third-party client of Java Redisson's RLock) in
// a node process, driven by node/driver.mjs's line commands.
type nodeRedisson struct {
	in    io.WriteCloser
	lines chan string
}

// startNodeRedisson starts node/driver.mjs on the Redis at addr, or on the Redis Cluster with the
// seeds cluster (addr ""); it stops when t ends. The package's npm modules are installed by
// scripts/test (npm ci --prefix tests/interop/node).
func startNodeRedisson(t *testing.T, addr string, cluster ...string) *nodeRedisson {
	t.Helper()
	node := testkit.DebianTool(t, "nodejs", "node")
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	dir := filepath.Join(root, "tests", "interop", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-redisson")); err != nil {
		t.Fatalf("node-redisson is not installed: run npm ci --prefix tests/interop/node (scripts/test does): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, "driver.mjs")
	cmd.Dir = dir
	if len(cluster) > 0 {
		cmd.Env = append(os.Environ(), "REDIS_CLUSTER="+strings.Join(cluster, ","))
	} else {
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		cmd.Env = append(os.Environ(), "REDIS_HOST="+host, "REDIS_PORT="+port)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &testkit.LockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	n := &nodeRedisson{in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			n.lines <- sc.Text()
		}
		close(n.lines)
	}()
	t.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cancel()
			<-done
		}
		cancel()
		if t.Failed() {
			t.Logf("node-redisson's standard error:\n%s", stderr.String())
		}
	})
	require.Equal(t, "ready", n.next(t, 20*time.Second), "node-redisson started")
	return n
}

// send writes one command line.
func (n *nodeRedisson) send(t *testing.T, cmd, name string) {
	t.Helper()
	_, err := fmt.Fprintf(n.in, "%s %s\n", cmd, name)
	require.NoError(t, err)
}

// next returns the next answer line, failing t after timeout.
func (n *nodeRedisson) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-n.lines:
		require.True(t, ok, "node-redisson exited")
		return line
	case <-time.After(timeout):
		t.Fatalf("no answer from node-redisson within %v", timeout)
		return ""
	}
}

// do sends a command and returns its answer.
func (n *nodeRedisson) do(t *testing.T, cmd, name string) string {
	t.Helper()
	n.send(t, cmd, name)
	return n.next(t, 10*time.Second)
}

// gatewayWokenByNodeRedisson: node-redisson takes name, the gateway answers 409 and then a waiter
// in line, which node-redisson's unlock wakes within a second. It returns the waiter's grant.
func gatewayWokenByNodeRedisson(t *testing.T, w *world, n *nodeRedisson, name string) *harness.Response {
	t.Helper()
	require.Equal(t, "try true", n.do(t, "try", name))
	r := w.acquire(name, testkit.AcquireBody("web", 5000))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	waiting := testkit.StartWaiter(w.Client, t.Context(), name, "web", 5000, 20_000)
	testkit.EventuallyPaced(t, 10*time.Second, "the gateway waiter in line", func() bool { return w.Waiters(t, name) == 1 })
	unlocked := time.Now()
	require.Equal(t, "unlocked", n.do(t, "unlock", name))
	g := testkit.Receive(t, waiting, 15*time.Second, "the gateway waiter")
	require.Equal(t, http.StatusCreated, g.Status, string(g.Body))
	within(t, time.Since(unlocked), time.Second, "the gateway's grant after node-redisson's unlock")
	return g
}

// TestNodeRedissonAndTheGatewayExcludeEachOther is the outside report's scenario, run with
// node-redisson: node-redisson holds rs.orders and the gateway answers 409; the gateway holds
// rs.jobs and node-redisson's tryLock fails. Each side waits for the other and is woken by the
// other's release (node-redisson listens with SUBSCRIBE; the gateway publishes its releases).
func TestNodeRedissonAndTheGatewayExcludeEachOther(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "node-redisson is given one Redis address")
	w := newWorld(t)
	n := startNodeRedisson(t, w.Redis.Addr)

	w.release(t, "rs.orders", gatewayWokenByNodeRedisson(t, w, n, "rs.orders"))

	j := w.acquire("rs.jobs", testkit.AcquireBody("web", 60_000))
	require.Equal(t, http.StatusCreated, j.Status, string(j.Body))
	assert.Equal(t, "try false", n.do(t, "try", "rs.jobs"))
	n.send(t, "lock", "rs.jobs")
	// node-redisson subscribes after its failed try: wait for its subscription before releasing.
	awaitRedissonSubscriber(t, w, "redisson_lock__channel:{rs.jobs}")
	released := time.Now()
	w.release(t, "rs.jobs", j)
	line := n.next(t, 15*time.Second)
	at, ok := strings.CutPrefix(line, "locked ")
	require.True(t, ok, line)
	ms, err := strconv.ParseInt(at, 10, 64)
	require.NoError(t, err)
	within(t, time.UnixMilli(ms).Sub(released), time.Second, "node-redisson's lock() after the gateway's release (TTL 60 s)")
	r := w.acquire("rs.jobs", testkit.AcquireBody("web", 5000))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "unlocked", n.do(t, "unlock", "rs.jobs"))
}

// TestNodeRedissonOnACluster: node-redisson through ioredis's Cluster client (classic pub/sub, as
// it always publishes) and the gateway exclude each other on a Redis Cluster and wake each other.
func TestNodeRedissonOnACluster(t *testing.T) {
	t.Parallel()
	w := newClusterWorld(t)
	n := startNodeRedisson(t, "", w.rig.SeedAddrs()...)

	g := gatewayWokenByNodeRedisson(t, w, n, "rs.cluster.node")

	assert.Equal(t, "try false", n.do(t, "try", "rs.cluster.node"))
	n.send(t, "lock", "rs.cluster.node")
	testkit.EventuallyPaced(t, 10*time.Second, "node-redisson's subscription", func() bool {
		for _, node := range w.rig.Nodes() {
			if r, err := node.DoList("PUBSUB", "NUMSUB", "redisson_lock__channel:{rs.cluster.node}"); err == nil && len(r) == 2 && r[1] != "0" {
				return true
			}
		}
		return false
	})
	released := time.Now()
	w.release(t, "rs.cluster.node", g)
	line := n.next(t, 15*time.Second)
	at, ok := strings.CutPrefix(line, "locked ")
	require.True(t, ok, line)
	ms, err := strconv.ParseInt(at, 10, 64)
	require.NoError(t, err)
	within(t, time.UnixMilli(ms).Sub(released), time.Second, "node-redisson's lock() after the gateway's release")
	require.Equal(t, "unlocked", n.do(t, "unlock", "rs.cluster.node"))
}
