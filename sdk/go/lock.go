package leasegate

import (
	"context"
	"net/http"
	"time"
)

// Gateway is a client of one leasegate deployment: the generated client (API), plus Lock,
// AcquireSemaphore and LockAll.
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
	Owner string // required: who holds the lock
	// Mode is ModeExclusive (the zero value means it too: one holder) or ModeShared (any number of
	// shared holders, and no exclusive one).
	Mode     Mode
	TTL      time.Duration // lease time to live; 0: the server's default
	Wait     time.Duration // how long to wait for a held lock; 0: try once
	Watchdog bool          // let the gateway renew the lease until released
	MaxHold  time.Duration // watchdog leases only: stop renewing this long after the grant
	// MaxWaitPerRequest splits long waits into long-polls. Default 30s (the gateway caps a longer
	// one to its LEASEGATE_MAX_WAIT, 60s by default). Each
	// long-poll after the first presents the queue ticket of the one before, so the split wait
	// keeps its place in the lock's FIFO queue.
	MaxWaitPerRequest time.Duration
	// IdempotencyKey identifies this acquire across retries, also through other replicas (a
	// retry gets the lease a lost answer carried). Default: a fresh key per Lock call.
	IdempotencyKey string
	// WatchLoss says when the lease follows its events stream to learn of a loss at once
	// (default WatchKept: from KeepAlive on, and a watchdog lease from its grant).
	WatchLoss WatchLoss
}

// Lock acquires name, waiting up to o.Wait (in FIFO order with other waiters, keeping its place
// across the long-polls a long wait is split into, and across a 503 from a replica that is shutting
// down or full, which it retries within the wait). It returns an error matching ErrHeld when the
// wait ran out, or ctx's error when ctx ended first. Its requests carry one Idempotency-Key, so a
// request retried after a lost answer cannot take a second lease; a gateway that cannot be reached
// is retried twice, then Lock returns the transport error (try another replica with the same
// o.IdempotencyKey).
//
// With o.Mode ModeShared the lease is a shared (read) hold: shared holders coexist, and an
// exclusive request waits for them all to leave (a shared request queues behind a waiting
// exclusive one).
func (c *Gateway) Lock(ctx context.Context, name string, o LockOptions) (*Lease, error) {
	return c.acquire(ctx, lockCalls{}, name, acquisition{
		owner: o.Owner, mode: o.Mode, ttl: o.TTL, watchdog: o.Watchdog, maxHold: o.MaxHold,
		wait: o.Wait, perRequest: o.MaxWaitPerRequest, key: o.IdempotencyKey, watch: o.WatchLoss,
	})
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

// lockCalls are a lock's endpoints (/locks/{name}).
type lockCalls struct{}

func (lockCalls) acquire(ctx context.Context, gw *Gateway, name string, r *acquisition, poll time.Duration, ticket *string) (*answer, *http.Response, error) {
	body := AcquireRequest{Owner: r.owner, TtlMs: millis(r.ttl), Watchdog: &r.watchdog, MaxHoldMs: millis(r.maxHold)}
	if r.mode != "" {
		body.Mode = &r.mode
	}
	if poll > 0 {
		body.WaitMs, body.QueueTicket = millis(poll), ticket
	}
	resp, err := gw.API.AcquireLockWithResponse(ctx, name, &AcquireLockParams{IdempotencyKey: &r.key}, body)
	if err != nil {
		return nil, nil, err
	}
	if resp.JSON201 == nil {
		return nil, resp.HTTPResponse, problem(resp.HTTPResponse, resp.Body)
	}
	return &answer{Grant: *resp.JSON201}, resp.HTTPResponse, nil
}

func (lockCalls) reenter(ctx context.Context, gw *Gateway, l *Lease, mode Mode, ttl time.Duration, key *string) (*answer, error) {
	resp, err := gw.API.AcquireLockWithResponse(ctx, l.Lock, &AcquireLockParams{LeaseToken: &l.Token, IdempotencyKey: key},
		AcquireRequest{Owner: l.Owner, Mode: &mode, TtlMs: millis(ttl)})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return &answer{Grant: *resp.JSON200}, nil
}

func (lockCalls) renew(ctx context.Context, gw *Gateway, l *Lease, ttl time.Duration, key *string) (*answer, error) {
	resp, err := gw.API.RenewLockWithResponse(ctx, l.Lock, &RenewLockParams{LeaseToken: l.Token, IdempotencyKey: key}, RenewRequest{TtlMs: millis(ttl)})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return &answer{Grant: *resp.JSON200}, nil
}

func (lockCalls) release(ctx context.Context, gw *Gateway, l *Lease, mode Mode, key *string) (*Release, error) {
	params := &ReleaseLockParams{LeaseToken: &l.Token, IdempotencyKey: key}
	if mode != "" {
		m := ReleaseLockParamsMode(mode)
		params.Mode = &m
	}
	resp, err := gw.API.ReleaseLockWithResponse(ctx, l.Lock, params)
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	r, err := resp.JSON200.AsRelease() // a release with a token never answers a force release's body
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func (lockCalls) watch(ctx context.Context, gw *Gateway, name, token string) (*http.Response, error) {
	params := &WatchLockParams{}
	if token != "" {
		params.LeaseToken = &token
	}
	return gw.API.WatchLock(ctx, name, params)
}
