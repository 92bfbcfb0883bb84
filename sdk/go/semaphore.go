package leasegate

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// SemaphoreOptions describe a request for a permit of a semaphore. Zero values mean the server's
// defaults (TTL) or none.
type SemaphoreOptions struct {
	Owner string // required: who holds the permit
	// Permits is the semaphore's size, 1-10000 (required). Whoever acquires while nobody holds or
	// waits sets it; a request naming another size meanwhile gets an error matching
	// ErrPermitsMismatch.
	Permits  int64
	TTL      time.Duration // the permit's lease time to live; 0: the server's default
	Wait     time.Duration // how long to wait for a free permit; 0: try once
	Watchdog bool          // let the gateway renew the permit's lease until released
	MaxHold  time.Duration // watchdog leases only: stop renewing this long after the grant
	// MaxWaitPerRequest splits long waits into long-polls that keep their place in line, as
	// LockOptions.MaxWaitPerRequest. Default 30s.
	MaxWaitPerRequest time.Duration
	// IdempotencyKey identifies this acquire across retries, as LockOptions.IdempotencyKey.
	IdempotencyKey string
	// WatchLoss says when the permit's lease follows the semaphore's events stream, as
	// LockOptions.WatchLoss (default WatchKept).
	WatchLoss WatchLoss
}

// AcquireSemaphore takes one permit of the semaphore name (a name space apart from locks'),
// waiting up to o.Wait as Lock does: in FIFO order, keeping its place across long-polls and across
// a 503 it retries within the wait, with one Idempotency-Key. The permit is a *Lease like a lock's
// (Renew, KeepAlive, Done, Reenter, Release work the same; its holds are shared ones), and its
// Permits field is the semaphore's size. AcquireSemaphore returns an error matching
// ErrSemaphoreFull when the wait ran out, one matching ErrPermitsMismatch at once when the
// semaphore has another size, or ctx's error when ctx ended first.
func (c *Gateway) AcquireSemaphore(ctx context.Context, name string, o SemaphoreOptions) (*Lease, error) {
	return c.acquire(ctx, semaphoreCalls{}, name, acquisition{
		owner: o.Owner, permits: o.Permits, ttl: o.TTL, watchdog: o.Watchdog, maxHold: o.MaxHold,
		wait: o.Wait, perRequest: o.MaxWaitPerRequest, key: o.IdempotencyKey, watch: o.WatchLoss,
	})
}

// InspectSemaphore reads the state of the semaphore name; with a token, State.Yours says whether
// it holds a permit.
func (c *Gateway) InspectSemaphore(ctx context.Context, name, token string) (*SemaphoreState, error) {
	params := &InspectSemaphoreParams{}
	if token != "" {
		params.LeaseToken = &token
	}
	resp, err := c.API.InspectSemaphoreWithResponse(ctx, name, params)
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return resp.JSON200, nil
}

// errPermitExclusive: a semaphore's permit was asked to re-enter or release an exclusive hold.
var errPermitExclusive = errors.New("a semaphore's permit has no exclusive hold")

// semaphoreCalls are a semaphore's endpoints (/semaphores/{name}).
type semaphoreCalls struct{}

// semaphoreAnswer turns a semaphore's grant body into the lock's form.
func semaphoreAnswer(g *SemaphoreGrant) *answer {
	return &answer{
		Grant: Grant{Lock: g.Semaphore, Mode: ModeShared, Owner: g.Owner, Token: g.Token, Fence: g.Fence,
			TtlMs: g.TtlMs, ExpiresAt: g.ExpiresAt, Holds: g.Holds, Watchdog: g.Watchdog},
		Permits: g.Permits, Used: g.Used,
	}
}

func (semaphoreCalls) acquire(ctx context.Context, gw *Gateway, name string, r *acquisition, poll time.Duration, ticket *string) (*answer, *http.Response, error) {
	body := SemaphoreAcquireRequest{Owner: r.owner, Permits: r.permits, TtlMs: millis(r.ttl), Watchdog: &r.watchdog, MaxHoldMs: millis(r.maxHold)}
	if poll > 0 {
		body.WaitMs, body.QueueTicket = millis(poll), ticket
	}
	resp, err := gw.API.AcquireSemaphoreWithResponse(ctx, name, &AcquireSemaphoreParams{IdempotencyKey: &r.key}, body)
	if err != nil {
		return nil, nil, err
	}
	if resp.JSON201 == nil {
		return nil, resp.HTTPResponse, problem(resp.HTTPResponse, resp.Body)
	}
	return semaphoreAnswer(resp.JSON201), resp.HTTPResponse, nil
}

func (semaphoreCalls) reenter(ctx context.Context, gw *Gateway, l *Lease, mode Mode, ttl time.Duration, key *string) (*answer, error) {
	if mode == ModeExclusive {
		return nil, errPermitExclusive
	}
	resp, err := gw.API.AcquireSemaphoreWithResponse(ctx, l.Lock, &AcquireSemaphoreParams{LeaseToken: &l.Token, IdempotencyKey: key},
		SemaphoreAcquireRequest{Owner: l.Owner, Permits: l.Permits, TtlMs: millis(ttl)})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return semaphoreAnswer(resp.JSON200), nil
}

func (semaphoreCalls) renew(ctx context.Context, gw *Gateway, l *Lease, ttl time.Duration, key *string) (*answer, error) {
	resp, err := gw.API.RenewSemaphoreWithResponse(ctx, l.Lock, &RenewSemaphoreParams{LeaseToken: l.Token, IdempotencyKey: key}, RenewRequest{TtlMs: millis(ttl)})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return semaphoreAnswer(resp.JSON200), nil
}

func (semaphoreCalls) release(ctx context.Context, gw *Gateway, l *Lease, mode Mode, key *string) (*Release, error) {
	if mode == ModeExclusive {
		return nil, errPermitExclusive
	}
	resp, err := gw.API.ReleaseSemaphoreWithResponse(ctx, l.Lock, &ReleaseSemaphoreParams{LeaseToken: &l.Token, IdempotencyKey: key})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	r, err := resp.JSON200.AsSemaphoreRelease() // a release with a token never answers a force release's body
	if err != nil {
		return nil, err
	}
	return &Release{Lock: r.Semaphore, Released: r.Released, Holds: r.Holds, Mode: ModeShared}, nil
}

func (semaphoreCalls) watch(ctx context.Context, gw *Gateway, name, token string) (*http.Response, error) {
	params := &WatchSemaphoreParams{}
	if token != "" {
		params.LeaseToken = &token
	}
	return gw.API.WatchSemaphore(ctx, name, params)
}
