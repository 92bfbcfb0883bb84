package commandline

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// TestScriptsRunStartsAndStopsItsRedis runs README's run command with a free Redis port: it starts
// redis-server there, serves, and on SIGTERM stops both.
func TestScriptsRunStartsAndStopsItsRedis(t *testing.T) {
	t.Parallel()
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	redisPort, err := harness.FreePort()
	require.NoError(t, err)
	listenPort, err := harness.FreePort()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(root, "scripts", "run"))
	cmd.Env = append(os.Environ(),
		"LEASEGATE_REDIS_ADDR=127.0.0.1:"+strconv.Itoa(redisPort),
		"LEASEGATE_LISTEN=127.0.0.1:"+strconv.Itoa(listenPort),
		"LEASEGATE_TOKEN_SECRET="+harness.TestTokenSecret,
		"TMPDIR="+t.TempDir())
	out := &testkit.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	base := "http://127.0.0.1:" + strconv.Itoa(listenPort)
	harness.Eventually(t, 120*time.Second, "the gateway to answer (it is built first)", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	assert.Contains(t, out.String(), "starting redis-server on 127.0.0.1:"+strconv.Itoa(redisPort))
	c := harness.NewClient(t, base)
	require.Equal(t, http.StatusCreated, c.Do(http.MethodPost, "/locks/run", nil, testkit.AcquireBody("w", 60000)).Status)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("scripts/run did not stop:\n%s", out.String())
	}
	redis := &harness.Redis{Addr: "127.0.0.1:" + strconv.Itoa(redisPort)}
	harness.Eventually(t, 10*time.Second, "its redis-server to stop", func() bool {
		_, err := redis.Do("PING")
		return err != nil
	})
}
