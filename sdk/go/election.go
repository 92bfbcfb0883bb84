package leasegate

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// CampaignOptions describe a campaign. Zero values mean the server's defaults (TTL) or none.
type CampaignOptions struct {
	Owner    string        // required: who campaigns
	TTL      time.Duration // the leader's lease time to live; 0: the server's default
	Wait     time.Duration // how long to wait in line to be elected; 0: try once
	Watchdog bool          // let the gateway renew the leader's lease until it resigns
	MaxHold  time.Duration // watchdog leases only: stop renewing this long after the election
	// MaxWaitPerRequest splits long waits into long-polls that keep their place in line, as
	// LockOptions.MaxWaitPerRequest. Default 30s.
	MaxWaitPerRequest time.Duration
	// IdempotencyKey identifies this campaign across retries, as LockOptions.IdempotencyKey.
	IdempotencyKey string
	// WatchLoss says when the lead follows the election's events to learn of a loss at once,
	// as LockOptions.WatchLoss (default WatchKept: from KeepAlive on, and a watchdog lead from its
	// election).
	WatchLoss WatchLoss
}

// Lead is a won election: its lease (Lock is the election's name) with the value it
// announces. Everything a lock's Lease does applies (Renew, RenewVia, KeepAlive, Watch, Done,
// Context, Err, EndReason, ValidUntil), with the same rule: Done closes when a renewal answers
// that the lead is gone, on Resign, or a safety margin before the lease can lapse with no renewal
// having pushed that back; a watched lead (see WatchLoss) also follows the election's events
// stream, so that a force release or an expiry closes Done within milliseconds (Err then matches
// ErrLeaseGone, as a *LostError). A lead is held once: Reenter and ReenterMode return an error,
// and Release and ReleaseMode (whatever the mode) resign. Safe for concurrent use.
type Lead struct {
	*Lease
	Since time.Time // when the leader was announced, by Redis's clock
	// EventID is the id of the elected event that announced this lead: an observer that resumes
	// after it sees what follows.
	EventID string

	value string // guarded by Lease.mu
}

// Campaign campaigns in the election name with value (what the leader announces, e.g. its
// address), waiting up to o.Wait in FIFO order as Lock does (keeping its place across long-polls
// and a 503 it retries within the wait, with one Idempotency-Key). It returns once elected, which
// every observer was told before. It returns an error matching ErrLed when the wait ran out, or
// ctx's error when ctx ended first.
func (c *Gateway) Campaign(ctx context.Context, name, value string, o CampaignOptions) (*Lead, error) {
	calls := &electionCalls{value: value}
	lease, err := c.acquire(ctx, calls, name, acquisition{
		owner: o.Owner, ttl: o.TTL, watchdog: o.Watchdog, maxHold: o.MaxHold,
		wait: o.Wait, perRequest: o.MaxWaitPerRequest, key: o.IdempotencyKey, watch: o.WatchLoss,
	})
	if err != nil {
		return nil, err
	}
	return &Lead{Lease: lease, Since: calls.won.Since, EventID: calls.won.EventId, value: calls.won.Value}, nil
}

// Value is the value the leader announces: its campaign's, or its latest Proclaim's.
func (l *Lead) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Proclaim announces value as the leader's new one (a proclaimed event; the same value again
// announces nothing). It returns an error matching ErrLeaseGone once the lead is lost (and ends
// its Context). A lost answer is retried with the same Idempotency-Key.
func (l *Lead) Proclaim(ctx context.Context, value string) error {
	err := retry(ctx, func(key *string) error {
		resp, err := l.client.API.ProclaimWithResponse(ctx, l.Lock, &ProclaimParams{LeaseToken: l.Token, IdempotencyKey: key}, ProclaimRequest{Value: value})
		if err != nil {
			return err
		}
		if resp.JSON200 == nil {
			return problem(resp.HTTPResponse, resp.Body)
		}
		return nil
	})
	if err != nil {
		l.endIfGone(err)
		return err
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// Resign gives up the lead: the first candidate in line is elected at once. It ends the
// lead's keep-alive, its events stream and its Context (ErrReleased); a lead already lost
// returns an error matching ErrLeaseGone. A lost answer is retried with the same Idempotency-Key.
func (l *Lead) Resign(ctx context.Context) error {
	_, err := l.Release(ctx)
	return err
}

// ResignVia is Resign through gw, another replica of the same deployment.
func (l *Lead) ResignVia(ctx context.Context, gw *Gateway) error {
	_, err := l.ReleaseVia(ctx, gw)
	return err
}

// InspectElection reads the election name: its leader, the candidates waiting, its last event.
func (c *Gateway) InspectElection(ctx context.Context, name string) (*ElectionState, error) {
	resp, err := c.API.InspectElectionWithResponse(ctx, name)
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return resp.JSON200, nil
}

// errNoReentry: an election's lead is held once; there is nothing to re-enter.
var errNoReentry = errors.New("an election's lead cannot be re-entered")

// electionCalls are an election's endpoints (/elections/{name}); value is the campaign's, and won
// the answer that elected it.
type electionCalls struct {
	value string
	won   Leadership
}

func (e *electionCalls) acquire(ctx context.Context, gw *Gateway, name string, r *acquisition, poll time.Duration, ticket *string) (*answer, *http.Response, error) {
	body := CampaignRequest{Owner: r.owner, Value: e.value, TtlMs: millis(r.ttl), Watchdog: &r.watchdog, MaxHoldMs: millis(r.maxHold)}
	if poll > 0 {
		body.WaitMs, body.QueueTicket = millis(poll), ticket
	}
	resp, err := gw.API.CampaignWithResponse(ctx, name, &CampaignParams{IdempotencyKey: &r.key}, body)
	if err != nil {
		return nil, nil, err
	}
	w := resp.JSON201
	if w == nil {
		return nil, resp.HTTPResponse, problem(resp.HTTPResponse, resp.Body)
	}
	e.won = *w
	return &answer{Grant: Grant{Lock: w.Election, Owner: w.Owner, Token: w.Token, Fence: w.Fence, TtlMs: w.TtlMs,
		ExpiresAt: w.ExpiresAt, Watchdog: w.Watchdog, Mode: ModeExclusive, Holds: 1}}, resp.HTTPResponse, nil
}

func (*electionCalls) reenter(context.Context, *Gateway, *Lease, Mode, time.Duration, *string) (*answer, error) {
	return nil, errNoReentry
}

func (*electionCalls) renew(ctx context.Context, gw *Gateway, l *Lease, ttl time.Duration, key *string) (*answer, error) {
	resp, err := gw.API.RenewLeadershipWithResponse(ctx, l.Lock, &RenewLeadershipParams{LeaseToken: l.Token, IdempotencyKey: key}, RenewRequest{TtlMs: millis(ttl)})
	if err != nil {
		return nil, err
	}
	r := resp.JSON200
	if r == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return &answer{Grant: Grant{Lock: r.Election, Owner: r.Owner, Token: r.Token, Fence: r.Fence, TtlMs: r.TtlMs,
		ExpiresAt: r.ExpiresAt, Watchdog: r.Watchdog, Mode: ModeExclusive, Holds: 1}}, nil
}

func (*electionCalls) release(ctx context.Context, gw *Gateway, l *Lease, _ Mode, key *string) (*Release, error) {
	resp, err := gw.API.ResignWithResponse(ctx, l.Lock, &ResignParams{LeaseToken: &l.Token, IdempotencyKey: key})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, problem(resp.HTTPResponse, resp.Body)
	}
	return &Release{Lock: l.Lock, Mode: ModeExclusive, Holds: 0, Released: true}, nil
}

// watch opens the election's events stream from its current state (an election's stream takes
// no token: the watcher looks for the lead's fence).
func (*electionCalls) watch(ctx context.Context, gw *Gateway, name, _ string) (*http.Response, error) {
	return gw.API.ObserveElection(ctx, name, &ObserveElectionParams{})
}
