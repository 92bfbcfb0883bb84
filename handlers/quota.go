package handlers

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/leasegate/leasegate/auth"
)

// Quotas are per-principal limits on one gateway replica, so that one client cannot take the
// service down: requests per second (a token bucket, golang.org/x/time/rate), waiting requests
// parked at once and event streams open at once. These are the defaults; a principal's own
// "quotas" in the auth file replace them for it (auth.Quotas). They apply to authenticated
// principals only (LEASEGATE_AUTH_FILE); without authentication the replica-wide
// LEASEGATE_MAX_WAITERS and LEASEGATE_MAX_STREAMS still bound parked requests and streams. Over a
// limit a request is answered 429 quota-exceeded with Retry-After, before anything else is done.
// (The cap on holds across replicas is lockcore's: see AcquireRequest.HeldCap.)
type Quotas struct {
	Rate    float64 // requests per second per principal (0: no limit)
	Burst   int     // the bucket's size: requests a principal may send at once (default: Rate, at least 1)
	Parked  int     // waiting requests a principal may have parked at once (0: no limit)
	Streams int     // event streams a principal may have open at once (0: no limit)
}

// quotaError is a request over one of its principal's quotas.
type quotaError struct {
	principal, limit string
	retryAfter       time.Duration
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("principal %q is over its quota of %s on this replica", e.principal, e.limit)
}

// quotas keeps each principal's use of its quotas on this replica.
type quotas struct {
	cfg Quotas

	mu sync.Mutex
	by map[string]*principalUse
}

type principalUse struct {
	limiter *rate.Limiter // nil: no rate limit
	parked  int           // waiting requests parked now
	streams int           // event streams open now
	seen    time.Time     // last request, for forgetting principals gone quiet
}

// forgetAfter is how long a principal's use is kept after its last request (its bucket is full
// again well before), and forgetAt how many principals make a request look for quiet ones.
const (
	forgetAfter = 10 * time.Minute
	forgetAt    = 10000
)

func newQuotas(cfg Quotas) *quotas {
	return &quotas{cfg: cfg, by: map[string]*principalUse{}}
}

// limits are p's quotas: its own where the auth file gives them, else the defaults.
func (q *quotas) limits(p *auth.Principal) (perSecond float64, burst, parked, streams int) {
	perSecond, burst, parked, streams = q.cfg.Rate, q.cfg.Burst, q.cfg.Parked, q.cfg.Streams
	own := p.Quotas
	if own.Rate != nil {
		perSecond, burst = *own.Rate, 0 // the default burst goes with the default rate
	}
	if own.Burst != nil {
		burst = *own.Burst
	}
	if own.Parked != nil {
		parked = *own.Parked
	}
	if own.Streams != nil {
		streams = *own.Streams
	}
	if perSecond > 0 && burst <= 0 {
		burst = max(int(math.Ceil(perSecond)), 1)
	}
	return perSecond, burst, parked, streams
}

// use returns principal's use, made on its first request. Call with q.mu held.
func (q *quotas) use(principal string, now time.Time) *principalUse {
	u := q.by[principal]
	if u == nil {
		if len(q.by) >= forgetAt {
			for p, old := range q.by {
				if old.parked == 0 && old.streams == 0 && now.Sub(old.seen) > forgetAfter {
					delete(q.by, p)
				}
			}
		}
		u = &principalUse{}
		q.by[principal] = u
	}
	u.seen = now
	return u
}

// allow takes one request from p's bucket, or says when to retry. A nil principal (no
// authentication) is not limited.
func (q *quotas) allow(p *auth.Principal) error { return q.allowN(p, 1) }

// allowN takes n requests from p's bucket at once, or none and says when to retry: a multi-lock
// costs one request per member (the guard took the first), so that the rate bounds the holds a
// principal makes Redis keep whichever way it asks for them (docs/auth.md). n is capped at the
// bucket's burst, which a request could otherwise never fit in.
func (q *quotas) allowN(p *auth.Principal, n int) error {
	if q == nil || p == nil || n <= 0 {
		return nil
	}
	perSecond, burst, _, _ := q.limits(p)
	if perSecond <= 0 {
		return nil
	}
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.use(p.Name, now)
	switch {
	case u.limiter == nil:
		u.limiter = rate.NewLimiter(rate.Limit(perSecond), burst)
	case u.limiter.Limit() != rate.Limit(perSecond) || u.limiter.Burst() != burst: // the auth file was reloaded
		u.limiter.SetLimitAt(now, rate.Limit(perSecond))
		u.limiter.SetBurstAt(now, burst)
	}
	n = min(n, burst)
	if u.limiter.AllowN(now, n) {
		return nil
	}
	r := u.limiter.ReserveN(now, n) // when the tokens would be there; not taken
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	return &quotaError{principal: p.Name, limit: fmt.Sprintf("%g requests per second", perSecond), retryAfter: wait}
}

// valueRequests is how many more requests of the rate quota than the guard's one an election's
// campaign or proclaim of value costs: one per KiB of it begun, since Redis keeps the value twice
// (the leader hash and the log) for the election retention, so that no request of the quota
// leaves more than docs/auth.md's bound. A 4 KiB value costs 5, a 1-byte one 2, an empty one 1.
func valueRequests(value string) int { return (len(value) + 1023) / 1024 }

// admitWait counts a waiting request of p until done is called, or refuses it when p has its quota of
// parked requests already.
func (q *quotas) admitWait(p *auth.Principal) (done func(), err error) {
	if q == nil || p == nil {
		return func() {}, nil
	}
	_, _, parked, _ := q.limits(p)
	return q.admit(p, parked, "parked waiting requests", func(u *principalUse) *int { return &u.parked })
}

// admitStream counts an event stream of p until done is called, or refuses it when p has its
// quota of open streams already.
func (q *quotas) admitStream(p *auth.Principal) (done func(), err error) {
	if q == nil || p == nil {
		return func() {}, nil
	}
	_, _, _, streams := q.limits(p)
	return q.admit(p, streams, "open event streams", func(u *principalUse) *int { return &u.streams })
}

// admit counts one more of what count points at in p's use, up to limit (0: none), until done.
func (q *quotas) admit(p *auth.Principal, limit int, what string, count func(*principalUse) *int) (done func(), err error) {
	if limit <= 0 {
		return func() {}, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := count(q.use(p.Name, time.Now()))
	if *n >= limit {
		return nil, &quotaError{principal: p.Name, limit: fmt.Sprintf("%d %s", limit, what), retryAfter: time.Second}
	}
	*n++
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			*n--
			q.mu.Unlock()
		})
	}, nil
}

// heldCap is the cap on holds a new lease of p's counts against (lockcore.AcquireRequest.HeldCap):
// its own "held" quota (0 there: none, -1 here), else 0, the gateway's default.
func heldCap(p *auth.Principal) int {
	switch {
	case p == nil || p.Quotas.Held == nil:
		return 0
	case *p.Quotas.Held == 0:
		return -1
	}
	return *p.Quotas.Held
}
