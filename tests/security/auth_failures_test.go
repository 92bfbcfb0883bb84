package security

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

const probAuthThrottled = "urn:leasegate:problem:authentication-throttled"

// TestAFloodOfBadJWTsIsThrottledBeforeVerification: a client address whose credentials keep
// failing gets 429 authentication-throttled with Retry-After, without its JWTs being verified,
// past LEASEGATE_AUTH_FAILURE_RATE's burst (default 20 per second, 100 in a row); a valid
// credential from it is served again once its bucket has a token.
func TestAFloodOfBadJWTsIsThrottledBeforeVerification(t *testing.T) {
	t.Parallel()
	e := newJWTEnv(t, false)
	forger, err := harness.NewJWTKey("first") // the gateway's kid, another key: a full RSA verification each
	require.NoError(t, err)
	start := time.Now()
	var refused, throttled int
	var retryAfter string
	for i := range 300 {
		tok, err := forger.Sign(jwtClaims("attacker-"+strconv.Itoa(i), []string{"*"}, []string{"lock"}, nil), true)
		require.NoError(t, err)
		r := e.Client.Do(http.MethodGet, "/locks/x", bearer(tok, ""), "")
		switch r.Status {
		case http.StatusUnauthorized:
			refused++
		case http.StatusTooManyRequests:
			throttled++
			assert.Equal(t, probAuthThrottled, r.Str("type"), "%s", r.Body)
			retryAfter = r.Header.Get("Retry-After")
		default:
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	took := time.Since(start).Seconds()
	t.Logf("300 forged JWTs in %.2f s: %d verified and refused (401), %d throttled (429)", took, refused, throttled)
	assert.Positive(t, throttled)
	assert.LessOrEqual(t, float64(refused), 100+20*took+1, "verified at most the burst plus the rate")
	assert.NotEmpty(t, retryAfter)

	worker, err := e.key.Sign(jwtClaims("system:serviceaccount:billing:worker", []string{"billing."}, []string{"lock", "inspect"}, nil), true)
	require.NoError(t, err)
	testkit.EventuallyPaced(t, 5*time.Second, "a valid JWT served again", func() bool {
		return e.Client.Do(http.MethodGet, "/locks/billing.ok", bearer(worker, ""), "").Status == http.StatusOK
	})
}
