package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// The bound docs/auth.md states, with the defaults: an election's keys last
// LEASEGATE_ELECTION_RETENTION (1 h) after its last announcement or check, its log keeps at most
// LEASEGATE_ELECTION_LOG_BYTES (128 KiB) of entries, and a campaign or proclaim costs one more
// request of the rate quota per KiB of its value begun, so that a request of the quota leaves at
// most bytesPerRequest bytes.
const (
	electionRetention = time.Hour
	electionLogBytes  = 128 << 10
	bytesPerRequest   = 8 << 10
)

// campaignBody is a campaign's body: owner, value, a TTL.
func campaignBody(owner, value string, ttlMs int64) string {
	b, _ := json.Marshal(map[string]any{"owner": owner, "value": value, "ttl_ms": ttlMs})
	return string(b)
}

// flood sends n requests from 8 clients, the ith made by req(i), and counts how they were
// answered: 2xx and 429; anything else fails the test.
func flood(t *testing.T, n int, req func(i int) (status int, body string)) (ok, limited int, took time.Duration) {
	t.Helper()
	var (
		next       atomic.Int64
		mu         sync.Mutex
		unexpected []string
		wg         sync.WaitGroup
	)
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				status, body := req(i)
				mu.Lock()
				switch {
				case status/100 == 2:
					ok++
				case status == http.StatusTooManyRequests:
					limited++
				default:
					unexpected = append(unexpected, fmt.Sprintf("%d: %s", status, body))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, unexpected, "requests answered neither 2xx nor 429")
	return ok, limited, time.Since(start)
}

// electionKeys returns the election keys of names matching pattern, with their size in Redis
// (MEMORY USAGE), after checking that each expires within the retention.
func (e *authEnv) electionKeys(t *testing.T, pattern string) (keys int, bytes int64) {
	t.Helper()
	all, err := e.Redis.DoList("KEYS", e.Gateway.KeyPrefix+pattern)
	require.NoError(t, err)
	for _, k := range all {
		ttl, err := strconv.ParseInt(e.Redis.MustDo(t, "PTTL", k), 10, 64)
		require.NoError(t, err)
		assert.True(t, ttl == -2 || (ttl >= 0 && ttl <= electionRetention.Milliseconds()),
			"%s expires within the election retention (%v): PTTL %d", k, electionRetention, ttl)
		if n, err := strconv.ParseInt(e.Redis.MustDo(t, "MEMORY", "USAGE", k, "SAMPLES", "0"), 10, 64); err == nil {
			keys, bytes = keys+1, bytes+n
		}
	}
	return keys, bytes
}

// TestWhatOnePrincipalMakesRedisKeepIsBounded: floods of each kind that leaves the most in Redis
// per request, with the defaults and auth on, stay within docs/auth.md's bound: at most
// bytesPerRequest per request of the rate quota, all of it expiring. The outside probe's election
// floods: campaigns on ever new names with 4 KiB values, left to lapse, kept ~11.4 KB each for
// 24 h; proclaims of new 4 KiB values on one election kept 5.48 MB (its log's 1,000 entries). Now
// every key they leave expires within the retention (1 h) and the log keeps at most its bytes.
// Then holds: locks, semaphore permits and multi-locks with watchdogs and Idempotency-Keys.
func TestWhatOnePrincipalMakesRedisKeepIsBounded(t *testing.T) {
	t.Parallel()
	testkit.StandaloneOnly(t, "reads the Redis keys directly")
	e := newAuthEnv(t, nil)
	owner, value := strings.Repeat("o", 128), strings.Repeat("v", 4096)
	cost := func(value string) int { return 1 + (len(value)+1023)/1024 } // requests of the quota a campaign or proclaim takes

	t.Run("campaigns on new names", func(t *testing.T) {
		// Every other campaign has an empty value: the most Redis keeps per request of the quota
		// (its log's first node is most of it), the others the longest value.
		var spent atomic.Int64 // requests of the quota the elected campaigns took
		won, limited, took := flood(t, 200, func(i int) (int, string) {
			name, v := fmt.Sprintf("billing.%s-%d", strings.Repeat("c", 188), i), value[:i%2*len(value)]
			r := e.Client.Do(http.MethodPost, "/elections/"+name, e.as("billing", ""), campaignBody(owner, v, 2000))
			if r.Status == http.StatusCreated {
				spent.Add(int64(cost(v)))
			}
			return r.Status, string(r.Body)
		})
		keys, bytes := e.electionKeys(t, "{billing.c*")
		t.Logf("200 campaigns with empty and %d-byte values in %v: %d elected (%d requests of the quota), %d refused 429; %d keys left, %d bytes (%.0f a campaign, %.0f a request of the quota)",
			len(value), took.Round(time.Millisecond), won, spent.Load(), limited, keys, bytes,
			float64(bytes)/float64(max(won, 1)), float64(bytes)/float64(max(spent.Load(), 1)))
		require.Positive(t, won)
		assert.LessOrEqual(t, float64(spent.Load()), 100+100*took.Seconds()+float64(cost(value)), "campaigns' requests within the default burst plus rate")
		assert.LessOrEqual(t, bytes, spent.Load()*bytesPerRequest, "what is left per request of the quota")
	})

	t.Run("proclaims on one election", func(t *testing.T) {
		name := "billing.proclaimed"
		var token string
		require.Eventually(t, func() bool { // the quota refills after the campaigns' flood
			r := e.Client.Do(http.MethodPost, "/elections/"+name, e.as("billing", ""), campaignBody(owner, value, 60000))
			token = r.Str("token")
			return r.Status == http.StatusCreated
		}, 10*time.Second, 50*time.Millisecond)
		// One leader proclaiming as fast as the quota lets it: each 429's Retry-After paces it (the
		// refused request took the guard's request of the quota all the same).
		const want = 48 // ~190 KiB of entries, past the log's 128 KiB
		var done, limited int
		start := time.Now()
		for i := 0; done < want && time.Since(start) < 30*time.Second; i++ {
			b, _ := json.Marshal(map[string]string{"value": fmt.Sprintf("%d-%s", i, value[:4000])})
			r := e.Client.Do(http.MethodPut, "/elections/"+name, e.as("billing", token), string(b))
			switch r.Status {
			case http.StatusOK:
				done++
			case http.StatusTooManyRequests:
				limited++
				after, err := strconv.Atoi(r.Header.Get("Retry-After"))
				require.NoError(t, err)
				<-time.After(min(time.Duration(after)*time.Second, 200*time.Millisecond))
			default:
				require.Failf(t, "a proclaim answered neither 200 nor 429", "%d: %s", r.Status, r.Body)
			}
		}
		took := time.Since(start)
		require.Equal(t, want, done, "proclaims announced within 30 s")
		leader, log := e.Gateway.KeyPrefix+"{"+name+"}:elect:leader", e.Gateway.KeyPrefix+"{"+name+"}:elect:log"
		entries, err := strconv.Atoi(e.Redis.MustDo(t, "XLEN", log))
		require.NoError(t, err)
		logBytes, err := strconv.ParseInt(e.Redis.MustDo(t, "MEMORY", "USAGE", log, "SAMPLES", "0"), 10, 64)
		require.NoError(t, err)
		counted, err := strconv.Atoi(e.Redis.MustDo(t, "HGET", leader, "bytes"))
		require.NoError(t, err)
		keys, bytes := e.electionKeys(t, "{"+name+"}*")
		t.Logf("proclaims of ~4 KiB values for %v: %d announced, %d refused 429; the log keeps %d entries, counted %d bytes, %d in Redis; the election's %d keys %d bytes",
			took.Round(time.Millisecond), done, limited, entries, counted, logBytes, keys, bytes)
		assert.Less(t, entries, done, "the log dropped its oldest entries")
		assert.LessOrEqual(t, counted, electionLogBytes, "the log's entries count at most LEASEGATE_ELECTION_LOG_BYTES")
		// Redis gives each entry of ~4 KiB a node of its own, in a larger allocation.
		assert.LessOrEqual(t, logBytes, int64(electionLogBytes*3/2), "the log takes at most 1.5x LEASEGATE_ELECTION_LOG_BYTES in Redis")
		assert.LessOrEqual(t, bytes, int64((done+1)*cost(value)*bytesPerRequest), "what is left per request of the quota")
	})

	t.Run("holds with watchdogs and idempotency keys", func(t *testing.T) {
		// Another principal (its own bucket): locks, semaphore permits and 4-member multi-locks,
		// each with a watchdog, a 128-byte owner and the longest Idempotency-Key, kept held.
		before := e.redisBytes(t)
		var spent atomic.Int64
		held, limited, took := flood(t, 240, func(i int) (int, string) {
			name := fmt.Sprintf("billing.%s-%03d", strings.Repeat("h", 186), i)
			h := e.as("billing-2", "")
			h["Idempotency-Key"] = fmt.Sprintf("%s-%d", strings.Repeat("k", 240), i)
			var r *harness.Response
			cost := 1
			switch i % 3 {
			case 0:
				r = e.Client.Do(http.MethodPost, "/locks/"+name, h, testkit.WatchdogBody(owner, 5000, ""))
			case 1:
				r = e.Client.Do(http.MethodPost, "/semaphores/"+name, h, testkit.WatchdogBody(owner, 5000, `,"permits":3`))
			default:
				delete(h, "Idempotency-Key") // a multi-lock takes none
				cost = 4
				r = e.Client.Do(http.MethodPost, "/multilocks", h,
					testkit.MultiBody(owner, []string{name + "-a", name + "-b", name + "-c", name + "-d"}, 5000, 0, `,"watchdog":true`))
			}
			if r.Status == http.StatusCreated {
				spent.Add(int64(cost))
			}
			return r.Status, string(r.Body)
		})
		bytes := e.redisBytes(t) - before
		t.Logf("240 watchdog holds asked (locks, permits, 4-member multi-locks) in %v: %d granted (%d requests of the quota), %d refused 429; Redis keeps %d bytes more (%.0f a request of the quota)",
			took.Round(time.Millisecond), held, spent.Load(), limited, bytes, float64(bytes)/float64(max(spent.Load(), 1)))
		require.Positive(t, held)
		assert.LessOrEqual(t, bytes, spent.Load()*bytesPerRequest, "what is left per request of the quota")
	})
}

// redisBytes is the size of every key in the test's Redis (MEMORY USAGE), after checking that
// each expires but the replicas' schedules, whose entries go with their leases.
func (e *authEnv) redisBytes(t *testing.T) int64 {
	t.Helper()
	all, err := e.Redis.DoList("KEYS", "*")
	require.NoError(t, err)
	var bytes int64
	for _, k := range all {
		ttl, err := strconv.ParseInt(e.Redis.MustDo(t, "PTTL", k), 10, 64)
		require.NoError(t, err)
		switch strings.TrimPrefix(k, e.Gateway.KeyPrefix) {
		case "watchdog", "watchdog:multi", "holds:aged":
		default:
			assert.NotEqual(t, int64(-1), ttl, "%s expires", k)
		}
		if n, err := strconv.ParseInt(e.Redis.MustDo(t, "MEMORY", "USAGE", k, "SAMPLES", "0"), 10, 64); err == nil {
			bytes += n
		}
	}
	return bytes
}
