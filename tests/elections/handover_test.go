package elections

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// handOver measures, rounds times, how long after a give-back's answer (give) the candidate
// waiting on the other replica has its answer (take), and returns the median.
func handOver(t *testing.T, rounds int, take func(i int) <-chan *harness.Response, give func(token string) int, waiting func() bool,
	first *harness.Response) time.Duration {
	t.Helper()
	token := first.Str("token")
	var took []time.Duration
	for i := range rounds {
		next := take(i)
		testkit.EventuallyPaced(t, 10*time.Second, "a candidate in line", waiting)
		require.Equal(t, http.StatusOK, give(token))
		given := time.Now()
		got := testkit.Receive(t, next, 10*time.Second, "the hand-over")
		took = append(took, time.Since(given))
		require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
		token = got.Str("token")
	}
	slices.Sort(took)
	return took[len(took)/2]
}

// TestResignHandsOverAsALockReleaseDoes compares the time from a resignation's answer to the
// next candidate's 201 with the time from a lock's release to its next waiter's 201, on two
// replicas: a resignation hands over in the same script as a release (then the candidate's
// replica announces it: one more script call).
func TestResignHandsOverAsALockReleaseDoes(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	const rounds = 15

	lock := handOver(t, rounds,
		func(int) <-chan *harness.Response {
			return testkit.StartWaiter(p.Client2, bg, "ho", "w", 30000, 20000)
		},
		func(token string) int {
			return p.Client.Do(http.MethodDelete, "/locks/ho", testkit.TokenHeader(token), "").Status
		},
		func() bool { return p.Waiters(t, "ho") == 1 },
		p.Hold(t, p.Client, "ho", "first", 30000))

	election := handOver(t, rounds,
		func(int) <-chan *harness.Response { return startCampaign(p.Client2, "ho", "c", "v", 30000, 20000) },
		func(token string) int { return resign(p.Client, "ho", token).Status },
		func() bool { return candidates(t, p.Client, "ho") == 1 },
		elect(t, p.Client, "ho", "first", "v", 30000))

	t.Logf("median hand-over after the answer to the give-back: lock %v, election %v", lock, election)
	assert.LessOrEqual(t, election, lock+25*time.Millisecond, "a resignation hands over about as fast as a release")
}
