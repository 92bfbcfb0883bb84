package leasegate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// MultiLockOptions describe a multi-lock request: as LockOptions, for every member at once. Zero
// values mean the server's defaults (TTL) or none. Multi-lock calls take no Idempotency-Key.
type MultiLockOptions struct {
	Owner string // required: who holds the locks
	// Mode is every member's: ModeExclusive (the zero value means it too) or ModeShared.
	Mode     Mode
	TTL      time.Duration // every member's time to live; 0: the server's default
	Wait     time.Duration // how long to wait for all members; 0: try once
	Watchdog bool          // let the gateway renew every member until released
	MaxHold  time.Duration // watchdog groups only: stop renewing this long after the grant
	// MaxWaitPerRequest splits long waits into long-polls. Default 30s. A long-poll that runs out
	// gives back the members it took (nothing is held between two), and the next one presents the
	// group queue ticket of its 409: the group keeps its id and its place in the line it waited
	// in, taking the members before that one again first.
	MaxWaitPerRequest time.Duration
	// WatchLoss says when the group follows its members' events streams (one connection per
	// member) to learn of a member's loss at once, as LockOptions.WatchLoss (default WatchKept:
	// from KeepAlive on, and a watchdog group from its grant).
	WatchLoss WatchLoss
}

// MultiLease is one lease holding several locks (Gateway.LockAll): its members are granted,
// renewed and released together. Its identity (ID, Owner, Token, Mode, Watchdog, Members) never
// changes; Grant follows its latest renewal. A MultiLease is safe for concurrent use.
//
// Done, Context and Err say when work under it must stop, as for a Lease: when a renewal or the
// release answers that it is gone (a member ran out: the gateway then frees the others), when it
// is released, or a safety margin before it can lapse (ValidUntil) with no renewal having pushed
// that back. Call KeepAlive to have it renewed for you. A watched group (see Watch) also learns
// within milliseconds that a member was force-released or expired: Err is then a *LostError
// naming the member. Its token is refused by the /locks endpoints, and a lock's token by the
// multi-lock ones.
type MultiLease struct {
	ID, Owner, Token string // ID: the group's, also its members' LockState.Multilock
	Mode             Mode   // every member's
	Watchdog         bool   // the gateway renews it (see MultiLockOptions.Watchdog)
	// Members are the locks with their fences, in name (byte) order. Each fence has the guarantee
	// of a single grant of that lock.
	Members []MultiLockMember

	client    *Gateway
	watchLoss WatchLoss
	// lifetime gives Done, Context, Err and ValidUntil; its mu guards grant.
	lifetime
	grant MultiLockGrant
}

// LockAll takes every lock in names (2-64 distinct names, in any order) under one lease, all or
// none, waiting up to o.Wait for them. A try-once call (o.Wait 0) is one atomic step on the
// gateway; a waiting one takes the members in name order, waiting in each member's line and
// holding the ones it has meanwhile (everyone takes them in that order, so groups cannot
// deadlock), and gives them all back if its wait runs out or ctx ends. A wait longer than
// o.MaxWaitPerRequest is split into long-polls, each asking again for the wait left with the
// queue ticket of the one before (keeping the group's id and place); a 503 is retried within the
// wait.
//
// LockAll returns an error matching ErrHeld when the wait ran out: its *ProblemError's Members
// are the locks that were held (or had others waiting). Multi-lock requests carry no
// Idempotency-Key (the gateway refuses one), so a request is sent again only when it cannot have
// reached the gateway (connection refused, twice at most); another transport error is returned as
// it is (a grant whose answer was lost lapses with its TTL).
func (c *Gateway) LockAll(ctx context.Context, names []string, o MultiLockOptions) (*MultiLease, error) {
	deadline := time.Now().Add(o.Wait)
	perRequest := o.MaxWaitPerRequest
	if perRequest <= 0 {
		perRequest = 30 * time.Second
	}
	body := MultiLockRequest{Owner: o.Owner, Locks: names, TtlMs: millis(o.TTL), Watchdog: &o.Watchdog, MaxHoldMs: millis(o.MaxHold)}
	if o.Mode != "" {
		body.Mode = &o.Mode
	}
	refused := 0
	var ticket *string
	for {
		body.WaitMs, body.QueueTicket = millis(min(time.Until(deadline), perRequest)), nil
		if body.WaitMs != nil && *body.WaitMs > 0 { // a ticket is for waiting requests only
			body.QueueTicket = ticket
		}
		sent := time.Now()
		resp, err := c.API.AcquireMultiLockWithResponse(ctx, body)
		if err != nil {
			if refused++; refused <= 2 && ctx.Err() == nil && unsent(err) {
				if err := sleep(ctx, 100*time.Millisecond); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if g := resp.JSON201; g != nil {
			m := newMultiLease(c, g, sent)
			m.watchLoss = o.WatchLoss
			// As for Lock: after a wait, count the TTL from a request sent after the grant.
			if time.Since(sent) > SafetyMargin(m.ttl) && !g.Watchdog {
				_ = m.Renew(ctx, 0) // on failure the earlier, conservative bound stands
			}
			m.arm(g.Watchdog)
			if o.WatchLoss == WatchAlways || o.WatchLoss == WatchKept && g.Watchdog {
				m.Watch()
			}
			return m, nil
		}
		err = problem(resp.HTTPResponse, resp.Body)
		var p *ProblemError
		if !errors.As(err, &p) || time.Until(deadline) <= 0 {
			return nil, err
		}
		switch {
		case errors.Is(p, ErrHeld): // ask again for the wait left, at the group's place if it has one
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

func newMultiLease(c *Gateway, g *MultiLockGrant, sent time.Time) *MultiLease {
	m := &MultiLease{ID: g.Id, Owner: g.Owner, Token: g.Token, Mode: g.Mode, Watchdog: g.Watchdog,
		Members: append([]MultiLockMember(nil), g.Locks...), client: c}
	m.start()
	m.renewed(g, sent)
	return m
}

// Grant returns the latest grant or renewal body (TTL, expiry, members with their fences).
func (m *MultiLease) Grant() MultiLockGrant {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.grant
}

// Fence is the fence of the member lock, 0 when lock is not a member.
func (m *MultiLease) Fence(lock string) int64 {
	for _, mm := range m.Members {
		if mm.Lock == lock {
			return mm.Fence
		}
	}
	return 0
}

// renewed records a grant or renewal, whose request was sent at sent.
func (m *MultiLease) renewed(g *MultiLockGrant, sent time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.grant = *g
	ttl := time.Duration(g.TtlMs) * time.Millisecond
	m.extend(ttl, sent.Add(ttl))
}

// Renew sets the TTL of every member to ttl (0: the group's own). It returns an error matching
// ErrLeaseGone once a member ran out (and ends the lease's Context): the gateway then frees the
// others, and the *ProblemError's Members are the lost ones. A lost answer or a 503 is retried
// (a second renewal changes nothing).
func (m *MultiLease) Renew(ctx context.Context, ttl time.Duration) error {
	return m.RenewVia(ctx, m.client, ttl)
}

// RenewVia is Renew through gw, another replica of the same deployment (any replica with the
// same token secret can renew any lease): for when the one that granted the lease is unreachable.
func (m *MultiLease) RenewVia(ctx context.Context, gw *Gateway, ttl time.Duration) error {
	var sent time.Time
	var g *MultiLockGrant
	err := m.setTTL(ctx, func() error {
		err := resend(ctx, func() error {
			sent = time.Now()
			resp, err := gw.API.RenewMultiLockByIdWithResponse(ctx, m.ID, &RenewMultiLockByIdParams{LeaseToken: m.Token}, RenewRequest{TtlMs: millis(ttl)})
			if err != nil {
				return err
			}
			if g = resp.JSON200; g == nil {
				return problem(resp.HTTPResponse, resp.Body)
			}
			return nil
		})
		if err == nil {
			m.renewed(g, sent) // before the next such call goes
		}
		return err
	})
	if err != nil {
		m.endIfGone(err)
		return err
	}
	return nil
}

// Release gives back every member, which ends the lease's keep-alive and its Context
// (ErrReleased); released is true exactly when err is nil (a group is given back whole: the
// result has Lease.Release's form so that code can keep either). It returns an error matching
// ErrLeaseGone when a member had run out (the gateway freed the others; the *ProblemError's
// Members are the lost ones). A lost answer or a 503 is retried; as multi-lock calls carry no
// Idempotency-Key, a retry answered 410 says so in its error, since the try whose answer was lost
// may have been the one that released the group.
func (m *MultiLease) Release(ctx context.Context) (released bool, err error) {
	return m.ReleaseVia(ctx, m.client)
}

// ReleaseVia is Release through gw, another replica of the same deployment.
func (m *MultiLease) ReleaseVia(ctx context.Context, gw *Gateway) (released bool, err error) {
	released, err = m.giveBack(ctx, gw)
	m.awaitWatchers() // once ended, its members' streams are closed before it returns
	return released, err
}

func (m *MultiLease) giveBack(ctx context.Context, gw *Gateway) (released bool, err error) {
	m.releases.RLock()
	defer m.releases.RUnlock()
	tries := 0
	err = resend(ctx, func() error {
		tries++
		resp, err := gw.API.ReleaseMultiLockByIdWithResponse(ctx, m.ID, &ReleaseMultiLockByIdParams{LeaseToken: m.Token})
		if err != nil {
			return err
		}
		if resp.JSON200 == nil {
			return problem(resp.HTTPResponse, resp.Body)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrLeaseGone) {
			m.end(err)
			if tries > 1 {
				err = fmt.Errorf("%w (after a try whose answer was lost, which may have released it)", err)
			}
		}
		return false, err
	}
	m.end(ErrReleased)
	return true, nil
}

// KeepAlive renews every member every third of the TTL until the lease is released or lost,
// retrying a failed renewal every SafetyMargin: any success before the margin keeps the lease (and
// Done open). Unless its options said WatchNever, it also watches the group (Watch). It returns at
// once; calling it again does nothing.
func (m *MultiLease) KeepAlive() {
	m.keepAlive(func(ctx context.Context) error { return m.Renew(ctx, 0) })
	if m.watchLoss != WatchNever {
		m.Watch()
	}
}

// Watch follows the events stream of every member from now on, as Lease.Watch does for a lock:
// the events endpoints take no multi-lock token, so each member's stream is opened without one
// (one connection per member) and the group looks for its member's fence in it: a forced or
// expired event of that fence ends the lease with a *LostError naming the member (the gateway
// frees the other members at the group's next renewal or release: Release it). A first event
// (after each reconnection) that does not show the member held has the group renewed at once,
// which ends it with the gateway's 410 (naming the lost members, and freeing the others) if a
// member is gone. Watch returns at once; it does nothing when
// the group is watched already or has ended.
func (m *MultiLease) Watch(via ...*Gateway) {
	if len(via) == 0 {
		via = []*Gateway{m.client}
	}
	targets := make([]watchTarget, len(m.Members))
	for i, member := range m.Members {
		targets[i] = watchTarget{calls: lockCalls{}, name: member.Lock, fence: member.Fence, multilock: m.ID,
			confirm: func(ctx context.Context) error { return m.RenewVia(ctx, via[0], 0) }}
	}
	m.watch(targets, via)
}
