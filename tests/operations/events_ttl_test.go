package operations

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/testkit"
)

// A renewal moves a shared hold past the first 100 that a state lists: the stream must not take
// it for expired (nor its own lease for lost) when it does not see it listed.
func TestEventsRenewedHoldBeyondTheFirst100IsNotExpired(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	var wg sync.WaitGroup
	errs := make(chan string, 101)
	for i := 0; i < 101; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := e.Client.Do(http.MethodPost, "/semaphores/big", nil, fmt.Sprintf(`{"owner":"o%d","permits":200,"ttl_ms":60000}`, i))
			if r.Status != http.StatusCreated {
				errs <- string(r.Body)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		require.Fail(t, "acquire", msg)
	}
	// Granted last, a's hold runs out first: the state lists it.
	a := e.Client.Do(http.MethodPost, "/semaphores/big", nil, `{"owner":"a","permits":200,"ttl_ms":2000}`)
	require.Equal(t, http.StatusCreated, a.Status, string(a.Body))
	token := testkit.TokenHeader(a.Str("token"))
	s := testkit.OpenEvents(t, e.Gateway.URL, "/semaphores/big/events", token)
	s.Expect(t, "state", "")
	r := e.Client.Do(http.MethodPost, "/semaphores/big/renew", token, `{"ttl_ms":120000}`)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))

	// a's first TTL (2 s) passes: it was renewed, and is no longer among the first 100 holds.
	s.NoEventOf(t, 3500*time.Millisecond, "expired", "lost")
	g := e.Client.Do(http.MethodGet, "/semaphores/big", token, "")
	require.Equal(t, http.StatusOK, g.Status, string(g.Body))
	assert.Equal(t, true, g.JSON()["yours"], string(g.Body))
}

// A renewal that shortens the TTL moves the stream's expiry estimate: lost arrives when the lease
// runs out, not when the old TTL would have.
func TestEventsLostAfterARenewalShortenedTheTTL(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	a := e.Hold(t, e.Client, "shorter", "w", 20000)
	token := testkit.TokenHeader(a.Str("token"))
	s := testkit.OpenEvents(t, e.Gateway.URL, "/locks/shorter/events", token)
	s.Expect(t, "state", "w")
	r := e.Client.Do(http.MethodPost, "/locks/shorter/renew", token, `{"ttl_ms":500}`)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	renewed := time.Now()
	x := s.Next(t, 3*time.Second)
	require.Equal(t, "expired", x.Type, "%v", x.Data)
	lost := s.Next(t, 3*time.Second)
	require.Equal(t, "lost", lost.Type, "%v", lost.Data)
	assert.Equal(t, "expired", lost.Str("reason"))
	assert.Less(t, lost.At.Sub(renewed), 2*time.Second, "lost within a few ms of the new expiry")

	// The same after a re-entry with a shorter TTL.
	b := e.Hold(t, e.Client, "shorter2", "w", 20000)
	token = testkit.TokenHeader(b.Str("token"))
	s2 := testkit.OpenEvents(t, e.Gateway.URL, "/locks/shorter2/events", token)
	s2.Expect(t, "state", "w")
	r = e.Client.Do(http.MethodPost, "/locks/shorter2", token, `{"owner":"w","ttl_ms":500}`)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	renewed = time.Now()
	require.Equal(t, "expired", s2.Next(t, 3*time.Second).Type)
	lost = s2.Next(t, 3*time.Second)
	require.Equal(t, "lost", lost.Type, "%v", lost.Data)
	assert.Less(t, lost.At.Sub(renewed), 2*time.Second)
}
