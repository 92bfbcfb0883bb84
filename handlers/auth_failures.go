package handlers

import (
	"cmp"
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// AuthFailures bound the failed authentications of each client address on this replica: a
// request whose credential turns out to be no principal's (a wrong or revoked API key, a JWT with a
// bad signature, expired, of another issuer) costs the gateway a hash or an RSA or ECDSA
// verification, before any quota can apply, since quotas are per principal. Past Burst failures
// in a row, at Rate per second, the address's requests are answered 429
// authentication-throttled with Retry-After, before their credentials are looked at; successful
// authentications cost nothing here. An IPv6 address counts by its /64 (one host's usual share).
// The client address is the peer's, or behind a trusted proxy the one it forwards (see
// clientAddresses).
type AuthFailures struct {
	Rate  float64 // failed authentications per second per client address (0: no limit)
	Burst int     // failures in a row before the limit bites (default: 5 x Rate, at least 1)
	// Tracked bounds the addresses kept (default authFailuresTracked): the least recently seen
	// is forgotten first, and Evicted, when set, is called for each one forgotten that way.
	Tracked int
	Evicted func()
}

// authFailuresTracked is AuthFailures.Tracked's default: each address costs about 300 bytes
// (measured with TestAuthFailuresTableIsBounded), so 10,000 take about 3 MB.
const authFailuresTracked = 10_000

// authThrottledError: the client address failed to authenticate too often.
type authThrottledError struct {
	addr       string
	retryAfter time.Duration
}

func (e *authThrottledError) Error() string {
	return fmt.Sprintf("too many failed authentications from %s; retry after %v with a valid credential", e.addr, e.retryAfter.Round(time.Millisecond))
}

// failedAuths keeps a token bucket of failures per client address, a failure taking a token, in a
// least-recently-used table of fixed size: constant memory and constant work per request, however
// many addresses fail (before 2026-12-06 a map without a cap, swept whole past 10,000 entries
// under the lock every request took).
type failedAuths struct {
	limit rate.Limit
	burst int
	by    *lru.Cache[string, *rate.Limiter]
}

func newFailedAuths(cfg AuthFailures) *failedAuths {
	if cfg.Rate <= 0 {
		return nil
	}
	burst := cfg.Burst
	if burst <= 0 {
		burst = max(int(5*cfg.Rate), 1)
	}
	var onEvict func(string, *rate.Limiter)
	if cfg.Evicted != nil {
		onEvict = func(string, *rate.Limiter) { cfg.Evicted() }
	}
	by, err := lru.NewWithEvict(cmp.Or(cfg.Tracked, authFailuresTracked), onEvict)
	if err != nil { // only for a size below 1
		panic(err)
	}
	return &failedAuths{limit: rate.Limit(cfg.Rate), burst: burst, by: by}
}

// check refuses the address's request when its failures used up its bucket (nil: no limit).
func (f *failedAuths) check(addr string) error {
	if f == nil {
		return nil
	}
	u, ok := f.by.Peek(addr)
	now := time.Now()
	if !ok || u.TokensAt(now) >= 1 {
		return nil
	}
	r := u.ReserveN(now, 1) // when a token would be there; not taken
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	return &authThrottledError{addr: addr, retryAfter: wait}
}

// failed takes a token from the address's bucket.
func (f *failedAuths) failed(addr string) {
	if f == nil {
		return
	}
	u, ok := f.by.Get(addr)
	if !ok {
		u = rate.NewLimiter(f.limit, f.burst)
		if prev, found, _ := f.by.PeekOrAdd(addr, u); found {
			u = prev
		}
	}
	u.AllowN(time.Now(), 1)
}
