package handlers

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// AuthFailures bound the failed authentications of each client address on this replica: a
// request whose credential turns out to be no principal's (a wrong or revoked API key, a JWT with a
// bad signature, expired, of another issuer) costs the gateway a hash or an RSA or ECDSA
// verification, before any quota can apply, since quotas are per principal. Past Burst failures
// in a row, at Rate per second, the address's requests are answered 429
// authentication-throttled with Retry-After, before their credentials are looked at; successful
// authentications cost nothing here. Behind a proxy every client shares the proxy's address.
type AuthFailures struct {
	Rate  float64 // failed authentications per second per client address (0: no limit)
	Burst int     // failures in a row before the limit bites (default: 5 x Rate, at least 1)
}

// authThrottledError: the client address failed to authenticate too often.
type authThrottledError struct {
	addr       string
	retryAfter time.Duration
}

func (e *authThrottledError) Error() string {
	return fmt.Sprintf("too many failed authentications from %s; retry after %v with a valid credential", e.addr, e.retryAfter.Round(time.Millisecond))
}

// failedAuths keeps a token bucket of failures per client address; a failure takes a token.
type failedAuths struct {
	limit rate.Limit
	burst int

	mu sync.Mutex
	by map[string]*failures
}

type failures struct {
	bucket *rate.Limiter
	seen   time.Time
}

func newFailedAuths(cfg AuthFailures) *failedAuths {
	if cfg.Rate <= 0 {
		return nil
	}
	burst := cfg.Burst
	if burst <= 0 {
		burst = max(int(5*cfg.Rate), 1)
	}
	return &failedAuths{limit: rate.Limit(cfg.Rate), burst: burst, by: map[string]*failures{}}
}

// clientAddress is the request's remote IP address (without its port).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// check refuses the address's request when its failures used up its bucket (nil: no limit).
func (f *failedAuths) check(addr string) error {
	if f == nil {
		return nil
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.by[addr]
	if u == nil || u.bucket.TokensAt(now) >= 1 {
		return nil
	}
	r := u.bucket.ReserveN(now, 1) // when a token would be there; not taken
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	return &authThrottledError{addr: addr, retryAfter: wait}
}

// failed takes a token from the address's bucket.
func (f *failedAuths) failed(addr string) {
	if f == nil {
		return
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.by[addr]
	if u == nil {
		if len(f.by) >= forgetAt {
			for a, old := range f.by {
				if now.Sub(old.seen) > forgetAfter {
					delete(f.by, a)
				}
			}
		}
		u = &failures{bucket: rate.NewLimiter(f.limit, f.burst)}
		f.by[addr] = u
	}
	u.seen = now
	u.bucket.AllowN(now, 1)
}
