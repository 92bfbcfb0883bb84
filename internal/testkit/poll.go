package testkit

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// Waiting for conditions without sleeping, and checking that they last (harness.Eventually is the
// 5 ms poll). All of these fail t, so call them from the test's goroutine only.

// EventuallyPaced is harness.Eventually polling every 50 ms: for conditions that send a request
// to the gateway, which a 5 ms poll would flood.
func EventuallyPaced(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-time.After(50 * time.Millisecond)
	}
}

// Receive returns what ch delivers, failing t if nothing arrives within timeout. Test
// goroutine only.
func Receive[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("nothing received for %s after %v", what, timeout)
		panic("unreachable")
	}
}

// Throughout checks cond every 100 ms for d; it must hold every time.
func Throughout(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		require.True(t, cond(), what)
		if now.After(deadline) {
			return
		}
	}
}

// HeldThroughout checks, every 50 ms until d has passed since from, that lock is held with fence.
func HeldThroughout(t *testing.T, c *harness.Client, lock string, fence int64, from time.Time, d time.Duration) {
	t.Helper()
	for time.Since(from) < d {
		st := c.Do(http.MethodGet, "/locks/"+lock, nil, "")
		require.Equal(t, true, st.JSON()["held"], "lock %s lost after %v", lock, time.Since(from))
		require.Equal(t, fence, st.Int("fence"), "same lease")
		<-time.After(50 * time.Millisecond)
	}
}

// FreeThroughout checks, every 50 ms for d, that lock stays free.
func FreeThroughout(t *testing.T, c *harness.Client, lock string, d time.Duration) {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; <-time.After(50 * time.Millisecond) {
		require.Equal(t, false, c.Do(http.MethodGet, "/locks/"+lock, nil, "").JSON()["held"], "resurrected")
	}
}
