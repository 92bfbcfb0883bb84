package redisson

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leasegate/leasegate/internal/harness"
)

// TestMain fails the package's tests if a goroutine outlives them: every Client is closed (and its
// rueidis client after it) in t.Cleanup, so one left behind is a watchdog or subscription that
// Close did not stop. rueidis's Cluster client may leave a refresh goroutine sleeping after Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

// newClient returns a Client ("a JVM") with a rueidis client of its own on addrs (one address: a
// single Redis; several: a Cluster), both closed when t ends.
func newClient(t *testing.T, addrs []string, opts Options) *Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true,
		ForceSingleClient: len(addrs) == 1})
	require.NoError(t, err)
	c := New(rc, opts)
	t.Cleanup(func() {
		c.Close()
		rc.Close()
	})
	return c
}

// twoInstances starts a redis-server and two Clients on it.
func twoInstances(t *testing.T, opts Options) (*harness.Redis, *Client, *Client) {
	t.Helper()
	r := harness.NewRedis(t, harness.RedisOptions{})
	return r, newClient(t, []string{r.Addr}, opts), newClient(t, []string{r.Addr}, opts)
}

// blockedWaits returns how many of c's waits are blocked on channel's latch.
func blockedWaits(c *Client, channel string) int {
	c.subs.mu.Lock()
	e := c.subs.entries[channel]
	c.subs.mu.Unlock()
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waiting
}

// wakeDelay starts acquire on a goroutine, waits until it is blocked on c's latch for channel,
// then runs release and returns how long after release started acquire returned. The holder's TTL
// is far longer than the test's patience: only the release message can wake the wait in time.
func wakeDelay(t *testing.T, c *Client, channel string, acquire func(context.Context) error, release func() error) time.Duration {
	t.Helper()
	type result struct {
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		err := acquire(t.Context())
		done <- result{time.Now(), err}
	}()
	harness.Eventually(t, 10*time.Second, "the wait to block on "+channel, func() bool {
		return blockedWaits(c, channel) >= 1
	})
	start := time.Now()
	require.NoError(t, release())
	select {
	case r := <-done:
		require.NoError(t, r.err)
		return r.at.Sub(start)
	case <-time.After(20 * time.Second):
		t.Fatalf("the wait on %s was not woken within 20 s of the release", channel)
		return 0
	}
}

// summary renders delays as min / median / max.
func summary(delays []time.Duration) string {
	s := slices.Clone(delays)
	slices.Sort(s)
	return s[0].String() + " / " + s[len(s)/2].String() + " / " + s[len(s)-1].String()
}
