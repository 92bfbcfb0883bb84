package leasegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Errors a call can be matched against with errors.Is.
var (
	ErrHeld      = errors.New("lock is held by another lease")  // 409 lock-held
	ErrLeaseGone = errors.New("lease no longer holds the lock") // 410 lease-gone
)

// ProblemError is a problem+json answer from the gateway.
type ProblemError struct {
	Problem
}

func (e *ProblemError) Error() string {
	return fmt.Sprintf("leasegate: %d %s: %s", e.Status, e.Title, e.Detail)
}

// Is matches ErrHeld and ErrLeaseGone by problem type.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrHeld:
		return e.Type == "urn:leasegate:problem:lock-held"
	case ErrLeaseGone:
		return e.Type == "urn:leasegate:problem:lease-gone"
	}
	return false
}

// RetryAfter is how long until the holder's lease runs out, for lock-held problems.
func (e *ProblemError) RetryAfter() time.Duration {
	if e.RetryAfterMs == nil {
		return 0
	}
	return time.Duration(*e.RetryAfterMs) * time.Millisecond
}

// problem turns a non-2xx answer into a *ProblemError.
func problem(resp *http.Response, body []byte) error {
	p := &ProblemError{}
	if err := json.Unmarshal(body, &p.Problem); err != nil || p.Type == "" {
		return fmt.Errorf("leasegate: unexpected answer %s: %.200s", resp.Status, body)
	}
	return p
}

// Gateway is a client of one leasegate deployment: the generated client (API), plus Lock.
type Gateway struct {
	API *ClientWithResponses
}

// New returns a client for the gateway at server, e.g. "http://127.0.0.1:8080".
func New(server string, opts ...ClientOption) (*Gateway, error) {
	api, err := NewClientWithResponses(server, opts...)
	if err != nil {
		return nil, err
	}
	return &Gateway{API: api}, nil
}

// LockOptions describe a lock request. Zero values mean the server's defaults (TTL) or none.
type LockOptions struct {
	Owner    string        // required: who holds the lock
	TTL      time.Duration // lease time to live; 0: the server's default
	Wait     time.Duration // how long to wait for a held lock; 0: try once
	Watchdog bool          // let the gateway renew the lease until released
	MaxHold  time.Duration // watchdog leases only: stop renewing this long after the grant
	// MaxWaitPerRequest splits long waits into long-polls the server accepts. Default 30s. Each
	// long-poll after the first presents the queue ticket of the one before, so the split wait
	// keeps its place in the lock's FIFO queue.
	MaxWaitPerRequest time.Duration
}

// Lock acquires name, waiting up to o.Wait (in FIFO order with other waiters, keeping its place
// across the long-polls a long wait is split into, and across a 503 from a replica that is shutting
// down or full, which it retries within the wait). It returns an error matching ErrHeld when the
// wait ran out, or ctx's error when ctx ended first.
func (c *Gateway) Lock(ctx context.Context, name string, o LockOptions) (*Lease, error) {
	deadline := time.Now().Add(o.Wait)
	perRequest := o.MaxWaitPerRequest
	if perRequest <= 0 {
		perRequest = 30 * time.Second
	}
	var ticket *string
	for {
		body := AcquireRequest{Owner: o.Owner, TtlMs: millis(o.TTL), Watchdog: &o.Watchdog, MaxHoldMs: millis(o.MaxHold)}
		if wait := min(time.Until(deadline), perRequest); wait > 0 {
			body.WaitMs, body.QueueTicket = millis(wait), ticket
		}
		sent := time.Now()
		resp, err := c.API.AcquireLockWithResponse(ctx, name, &AcquireLockParams{}, body)
		if err != nil {
			return nil, err
		}
		if g := resp.JSON201; g != nil {
			return &Lease{client: c, Grant: *g, validUntil: validUntil(sent, g)}, nil
		}
		err = problem(resp.HTTPResponse, resp.Body)
		var p *ProblemError
		if !errors.As(err, &p) || time.Until(deadline) <= 0 {
			return nil, err
		}
		switch {
		case p.Status == http.StatusConflict:
			ticket = p.QueueTicket
		case p.Status == http.StatusServiceUnavailable:
			if p.QueueTicket != nil {
				ticket = p.QueueTicket
			}
			if err := sleep(ctx, min(retryPause(resp.HTTPResponse), time.Until(deadline))); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
}

// retryPause is how long to wait before retrying a 503: its Retry-After, at most a second.
func retryPause(resp *http.Response) time.Duration {
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, time.Second)
	}
	return time.Second
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Inspect reads the state of name; with a token, State.Yours says whether it holds the lock.
func (c *Gateway) Inspect(ctx context.Context, name, token string) (*LockState, error) {
	params := &InspectLockParams{}
	if token != "" {
		params.LeaseToken = &token
	}
	resp, err := c.API.InspectLockWithResponse(ctx, name, params)
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return resp.JSON200, nil
}

// Lease is a held lock. Its Grant carries the token and the fence.
type Lease struct {
	client *Gateway
	Grant
	validUntil time.Time
}

// ValidUntil is when the lease lapses at the earliest unless renewed: the TTL of its last grant,
// renewal or re-entry, counted on this process's monotonic clock from when that request was sent
// (not from when its answer arrived, which may be later). Work under the lease must be over by then.
func (l *Lease) ValidUntil() time.Time { return l.validUntil }

// validUntil is sent + the grant's TTL, keeping sent's monotonic clock reading.
func validUntil(sent time.Time, g *Grant) time.Time {
	return sent.Add(time.Duration(g.TtlMs) * time.Millisecond)
}

// Renew sets the lease's TTL (0: keep its own) and updates Grant. It returns an error matching
// ErrLeaseGone once the lease is lost.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	resp, err := l.client.API.RenewLockWithResponse(ctx, l.Lock, &RenewLockParams{LeaseToken: l.Token}, RenewRequest{TtlMs: millis(ttl)})
	if err != nil {
		return err
	}
	if resp.JSON200 == nil {
		return problem(resp.HTTPResponse, resp.Body)
	}
	l.Grant, l.validUntil = *resp.JSON200, validUntil(sent, resp.JSON200)
	return nil
}

// Reenter takes the lock once more with the same lease (reentrant), resetting its TTL to ttl.
func (l *Lease) Reenter(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	resp, err := l.client.API.AcquireLockWithResponse(ctx, l.Lock, &AcquireLockParams{LeaseToken: &l.Token},
		AcquireRequest{Owner: l.Owner, TtlMs: millis(ttl)})
	if err != nil {
		return err
	}
	if resp.JSON200 == nil {
		return problem(resp.HTTPResponse, resp.Body)
	}
	l.Grant, l.validUntil = *resp.JSON200, validUntil(sent, resp.JSON200)
	return nil
}

// Release gives back one hold; released reports whether the lock is now free of this lease.
func (l *Lease) Release(ctx context.Context) (released bool, err error) {
	resp, err := l.client.API.ReleaseLockWithResponse(ctx, l.Lock, &ReleaseLockParams{LeaseToken: l.Token})
	if err != nil {
		return false, err
	}
	if resp.JSON200 == nil {
		return false, problem(resp.HTTPResponse, resp.Body)
	}
	l.Holds = resp.JSON200.Holds
	return resp.JSON200.Released, nil
}

func millis(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
