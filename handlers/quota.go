package handlers

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Quotas are per-principal limits on one gateway replica, so that one client cannot take the
// service down: requests per second (a token bucket, golang.org/x/time/rate) and waiting requests
// parked at once. They apply to authenticated principals only (LEASEGATE_AUTH_FILE); without
// authentication the replica-wide LEASEGATE_MAX_WAITERS still bounds parked requests. Over a
// limit a request is answered 429 quota-exceeded with Retry-After, before anything else is done.
type Quotas struct {
	Rate   float64 // requests per second per principal (0: no limit)
	Burst  int     // the bucket's size: requests a principal may send at once (default: Rate, at least 1)
	Parked int     // waiting requests a principal may have parked at once (0: no limit)
}

// quotaError is a request over one of its principal's quotas.
type quotaError struct {
	principal, limit string
	retryAfter       time.Duration
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("principal %q is over its quota of %s on this replica", e.principal, e.limit)
}

// quotas keeps each principal's use of its Quotas on this replica.
type quotas struct {
	cfg Quotas

	mu sync.Mutex
	by map[string]*principalUse
}

type principalUse struct {
	limiter *rate.Limiter // nil: no rate limit
	parked  int
	seen    time.Time // last request, for forgetting principals gone quiet
}

// forgetAfter is how long a principal's use is kept after its last request (its bucket is full
// again well before), and forgetAt how many principals make a request look for quiet ones.
const (
	forgetAfter = 10 * time.Minute
	forgetAt    = 10000
)

func newQuotas(cfg Quotas) *quotas {
	if cfg.Rate > 0 && cfg.Burst <= 0 {
		cfg.Burst = max(int(math.Ceil(cfg.Rate)), 1)
	}
	return &quotas{cfg: cfg, by: map[string]*principalUse{}}
}

// use returns principal's use, made on its first request. Call with q.mu held.
func (q *quotas) use(principal string, now time.Time) *principalUse {
	u := q.by[principal]
	if u == nil {
		if len(q.by) >= forgetAt {
			for p, old := range q.by {
				if old.parked == 0 && now.Sub(old.seen) > forgetAfter {
					delete(q.by, p)
				}
			}
		}
		u = &principalUse{}
		if q.cfg.Rate > 0 {
			u.limiter = rate.NewLimiter(rate.Limit(q.cfg.Rate), q.cfg.Burst)
		}
		q.by[principal] = u
	}
	u.seen = now
	return u
}

// allow takes one request from principal's bucket, or says when to retry. An empty principal (no
// authentication) is not limited.
func (q *quotas) allow(principal string) error {
	if q == nil || q.cfg.Rate <= 0 || principal == "" {
		return nil
	}
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.use(principal, now)
	if u.limiter.AllowN(now, 1) {
		return nil
	}
	r := u.limiter.ReserveN(now, 1) // when a token would be there; not taken
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	return &quotaError{principal: principal, limit: fmt.Sprintf("%g requests per second", q.cfg.Rate), retryAfter: wait}
}

// park counts a waiting request of principal until done is called, or refuses it when principal
// has its quota of parked requests already.
func (q *quotas) park(principal string) (done func(), err error) {
	if q == nil || q.cfg.Parked <= 0 || principal == "" {
		return func() {}, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.use(principal, time.Now())
	if u.parked >= q.cfg.Parked {
		return nil, &quotaError{principal: principal, limit: fmt.Sprintf("%d parked waiting requests", q.cfg.Parked), retryAfter: time.Second}
	}
	u.parked++
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			u.parked--
			q.mu.Unlock()
		})
	}, nil
}
