package leasegate

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

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
	// IdempotencyKey identifies this acquire across retries, also through other replicas (a
	// retry gets the lease a lost answer carried). Default: a fresh key per Lock call.
	IdempotencyKey string
}

// Lock acquires name, waiting up to o.Wait (in FIFO order with other waiters, keeping its place
// across the long-polls a long wait is split into, and across a 503 from a replica that is shutting
// down or full, which it retries within the wait). It returns an error matching ErrHeld when the
// wait ran out, or ctx's error when ctx ended first. Its requests carry one Idempotency-Key, so a
// request retried after a lost answer cannot take a second lease; a gateway that cannot be reached
// is retried twice, then Lock returns the transport error (try another replica with the same
// o.IdempotencyKey).
func (c *Gateway) Lock(ctx context.Context, name string, o LockOptions) (*Lease, error) {
	deadline := time.Now().Add(o.Wait)
	perRequest := o.MaxWaitPerRequest
	if perRequest <= 0 {
		perRequest = 30 * time.Second
	}
	key := o.IdempotencyKey
	if key == "" {
		key = newKey()
	}
	params := &AcquireLockParams{IdempotencyKey: &key}
	var ticket *string
	unreachable := 0
	for {
		body := AcquireRequest{Owner: o.Owner, TtlMs: millis(o.TTL), Watchdog: &o.Watchdog, MaxHoldMs: millis(o.MaxHold)}
		if wait := min(time.Until(deadline), perRequest); wait > 0 {
			body.WaitMs, body.QueueTicket = millis(wait), ticket
		}
		sent := time.Now()
		resp, err := c.API.AcquireLockWithResponse(ctx, name, params, body)
		if err != nil {
			if unreachable++; unreachable <= 2 && ctx.Err() == nil && retryable(err) {
				if err := sleep(ctx, 100*time.Millisecond); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if g := resp.JSON201; g != nil {
			lease := newLease(c, g, sent)
			// The lease's TTL started when it was granted, after the request was sent; after a long
			// wait, counting from the send would make it lapse (on paper) at once. Renew it now to
			// count from a request sent after the grant.
			if time.Since(sent) > SafetyMargin(lease.ttl()) && !g.Watchdog {
				_ = lease.Renew(ctx, 0) // on failure the earlier, conservative bound stands
			}
			lease.arm()
			return lease, nil
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

func millis(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
