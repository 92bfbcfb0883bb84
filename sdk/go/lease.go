package leasegate

import (
	"context"
	"errors"
	"time"
)

// Lease is a held lock, or a held permit of a semaphore (Gateway.AcquireSemaphore). Its identity
// (Lock, Owner, Token, Fence, Watchdog, Permits) never changes; the rest follows its latest grant,
// renewal, re-entry and release. A Lease is safe for concurrent use: work may read it while
// KeepAlive renews it.
//
// A lock's lease holds it exclusively or shared (Mode). An exclusive lease may take a shared hold
// too (ReenterMode); it then holds the lock both ways, each way with its own re-entry count and
// TTL, until ReleaseMode (or Release, which gives back the exclusive hold first) gives one back. A
// semaphore's permit is a shared hold.
//
// Done, Context and Err say when work under the lease must stop: when a renewal answers that the
// lease is gone, when it is released, or a safety margin before it can lapse (ValidUntil) with no
// renewal having pushed that back. Call KeepAlive to have it renewed for you. (A watchdog lease is
// renewed by the gateway, so only a 410, its events stream or its release end it here.) A watched
// lease (see WatchLoss: by default from KeepAlive on, and a watchdog lease from its grant) also
// follows its lock's events stream, so that a force release or an expiry on the gateway closes
// Done within milliseconds (Err then matches ErrLeaseForced or ErrLeaseExpired); EndReason says
// why it ended.
type Lease struct {
	Lock, Owner, Token string // Lock: the lock's name, or the semaphore's for a permit
	Fence              int64
	Watchdog           bool  // the gateway renews it (see LockOptions.Watchdog)
	Permits            int64 // a permit's: the semaphore's size; 0 for a lock

	client    *Gateway
	calls     calls     // the lock's or the semaphore's endpoints
	watchLoss WatchLoss // when to watch its events stream
	// lifetime gives Done, Context, Err and ValidUntil; its mu guards the fields below. Its ttl and
	// validUntil are those of the hold that lapses first (the last one's, once none is left).
	lifetime
	grant Grant
	used  int64
	holds [2]hold // by slot(mode)
}

// hold is one way a lease holds its lock: exclusively, or shared (also a semaphore's permit).
type hold struct {
	count      int64 // re-entry count; 0: not held that way
	ttl        time.Duration
	validUntil time.Time // when the request that last set ttl was sent, + ttl
}

// slot is the index of mode's hold in Lease.holds.
func slot(mode Mode) int {
	if mode == ModeShared {
		return 1
	}
	return 0
}

func newLease(c *Gateway, kind calls, a *answer, sent time.Time) *Lease {
	l := &Lease{Lock: a.Lock, Owner: a.Owner, Token: a.Token, Fence: a.Fence, Watchdog: a.Watchdog, Permits: a.Permits,
		client: c, calls: kind}
	l.start()
	l.granted(a, sent)
	return l
}

// Grant returns the latest grant, re-entry or renewal body (TTL, expiry, holds, mode). For a
// semaphore's permit, Lock is the semaphore's name and Mode is ModeShared.
func (l *Lease) Grant() Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant
}

// Mode is how the lease holds its lock: ModeExclusive while it has an exclusive hold (and maybe a
// shared one too), else ModeShared. A semaphore's permit is ModeShared.
func (l *Lease) Mode() Mode {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.holds[slot(ModeExclusive)].count > 0:
		return ModeExclusive
	case l.holds[slot(ModeShared)].count > 0:
		return ModeShared
	}
	return l.grant.Mode
}

// Holds returns how many holds the lease has: 1 after the grant, +1 per re-entry, -1 per release
// (both ways counted, for a lease that holds its lock both ways).
func (l *Lease) Holds() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds[0].count + l.holds[1].count
}

// Used is, for a semaphore's permit, how many permits were in use just after its latest grant,
// re-entry or renewal, this one included; 0 for a lock.
func (l *Lease) Used() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

// recount sets ttl and validUntil from the hold that lapses first and moves the lapse timer to
// match; with no hold left they keep their values. l.mu held or l not shared yet.
func (l *Lease) recount() {
	first := -1
	for i, h := range l.holds {
		if h.count > 0 && (first < 0 || h.validUntil.Before(l.holds[first].validUntil)) {
			first = i
		}
	}
	if first < 0 {
		return
	}
	l.extend(l.holds[first].ttl, l.holds[first].validUntil)
}

// granted records a grant or a re-entry of one hold (a.Mode), whose request was sent at sent.
func (l *Lease) granted(a *answer, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ttl := time.Duration(a.TtlMs) * time.Millisecond
	l.grant, l.used = a.Grant, a.Used
	l.holds[slot(a.Mode)] = hold{count: a.Holds, ttl: ttl, validUntil: sent.Add(ttl)}
	l.recount()
}

// renewed records a renewal to ttl (0: every hold kept its own), whose request was sent at sent.
// Its answer describes the exclusive hold when the lease has one, else the shared one.
func (l *Lease) renewed(a *answer, ttl time.Duration, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grant, l.used = a.Grant, a.Used
	if a.Mode == ModeShared {
		l.holds[slot(ModeExclusive)].count = 0
	}
	reported := &l.holds[slot(a.Mode)]
	reported.count, reported.ttl = a.Holds, time.Duration(a.TtlMs)*time.Millisecond
	for i := range l.holds {
		if h := &l.holds[i]; h.count > 0 {
			if ttl > 0 {
				h.ttl = ttl
			}
			h.validUntil = sent.Add(h.ttl)
		}
	}
	l.recount()
}

// released records a release and reports whether the lease holds nothing any more.
func (l *Lease) released(r *Release) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds[slot(r.Mode)].count = r.Holds
	if r.Mode == l.grant.Mode {
		l.grant.Holds = r.Holds
	}
	l.recount()
	return l.holds[0].count == 0 && l.holds[1].count == 0
}

// dropped records that the lease no longer holds its lock mode's way and reports whether it holds
// nothing any more.
func (l *Lease) dropped(mode Mode) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds[slot(mode)].count = 0
	l.recount()
	return l.holds[0].count == 0 && l.holds[1].count == 0
}

// Renew sets the TTL of the lease (of every hold it has) to ttl (0: each keeps its own). It
// returns an error matching ErrLeaseGone once the lease is lost (and ends its Context). A lost
// answer is retried with the same Idempotency-Key. Renewals and re-entries of one lease go one at
// a time (one waits for the answer to the one before), KeepAlive's among them, so that the TTL the
// lease counts with is the one Redis applied last.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	return l.RenewVia(ctx, l.client, ttl)
}

// RenewVia is Renew through gw, another replica of the same deployment (any replica with the
// same token secret can renew any lease): for when the one that granted the lease is unreachable.
func (l *Lease) RenewVia(ctx context.Context, gw *Gateway, ttl time.Duration) error {
	var sent time.Time
	var a *answer
	err := l.setTTL(ctx, func() error {
		err := retry(ctx, func(key *string) (err error) {
			sent = time.Now()
			a, err = l.calls.renew(ctx, gw, l, ttl, key)
			return err
		})
		if err == nil {
			l.renewed(a, ttl, sent) // before the next such call goes
		}
		return err
	})
	if err != nil {
		l.endIfGone(err)
		return err
	}
	return nil
}

// Reenter takes the lock once more with the same lease (reentrant), in its Mode, resetting that
// hold's TTL to ttl (0: the server's default).
func (l *Lease) Reenter(ctx context.Context, ttl time.Duration) error {
	return l.ReenterMode(ctx, l.Mode(), ttl)
}

// ReenterMode is Reenter asking for a hold of mode. An exclusive lease asking for ModeShared takes
// a shared hold beside its exclusive one (releasing the exclusive hold then leaves it holding the
// lock shared, with nobody in between: a downgrade). A shared lease asking for ModeExclusive gets
// an error matching ErrUpgradeRefused and keeps its shared hold. A semaphore's permit has only
// shared holds.
func (l *Lease) ReenterMode(ctx context.Context, mode Mode, ttl time.Duration) error {
	var sent time.Time
	var a *answer
	err := l.setTTL(ctx, func() error {
		err := retry(ctx, func(key *string) (err error) {
			sent = time.Now()
			a, err = l.calls.reenter(ctx, l.client, l, mode, ttl, key)
			return err
		})
		if err == nil {
			l.granted(a, sent) // before the next such call goes
		}
		return err
	})
	if err != nil {
		l.endIfGone(err)
		return err
	}
	return nil
}

// Release gives back one hold (of a lease holding its lock both ways, an exclusive one first);
// released reports whether the lease now holds nothing, which then ends its keep-alive, its events
// stream (closed before Release returns) and its Context (ErrReleased). A lost answer is retried
// with the same Idempotency-Key, so a retry never gives back a second hold.
func (l *Lease) Release(ctx context.Context) (released bool, err error) {
	return l.release(ctx, l.client, "")
}

// ReleaseVia is Release through gw, another replica of the same deployment.
func (l *Lease) ReleaseVia(ctx context.Context, gw *Gateway) (released bool, err error) {
	return l.release(ctx, gw, "")
}

// ReleaseMode is Release giving back one hold of mode, for a lease holding its lock both ways. It
// returns an error matching ErrLeaseGone when the lease has no hold of mode; that ends the lease
// only if it has no hold the other way either.
func (l *Lease) ReleaseMode(ctx context.Context, mode Mode) (released bool, err error) {
	return l.release(ctx, l.client, mode)
}

// release gives back one hold and, once the lease has ended, waits for its events streams to
// close.
func (l *Lease) release(ctx context.Context, gw *Gateway, mode Mode) (bool, error) {
	released, err := l.giveBack(ctx, gw, mode)
	l.awaitWatchers()
	return released, err
}

func (l *Lease) giveBack(ctx context.Context, gw *Gateway, mode Mode) (bool, error) {
	l.releases.RLock()
	defer l.releases.RUnlock()
	var r *Release
	err := retry(ctx, func(key *string) (err error) {
		r, err = l.calls.release(ctx, gw, l, mode, key)
		return err
	})
	if err != nil {
		// Asked for one way, a 410 says only that this way is gone.
		if errors.Is(err, ErrLeaseGone) && (mode == "" || l.dropped(mode)) {
			l.end(err)
		}
		return false, err
	}
	if l.released(r) {
		l.end(ErrReleased)
		return true, nil
	}
	return false, nil
}

// KeepAlive renews the lease every third of its TTL until it is released or lost, retrying a failed
// renewal every SafetyMargin: any success before the margin keeps the lease (and Done open). A
// Renew or Reenter by hand meanwhile counts as a renewal: the next is due a third of the TTL it
// set from then (a shorter TTL brings it forward). Unless
// its options said WatchNever, it also watches the lease (Watch). It returns at once; calling it
// again does nothing.
func (l *Lease) KeepAlive() {
	l.keepAlive(func(ctx context.Context) error { return l.Renew(ctx, 0) })
	if l.watchLoss != WatchNever {
		l.Watch()
	}
}

// Watch follows the lease's events stream from now on, whatever its WatchLoss, so that a force
// release or an expiry on the gateway closes Done within milliseconds (see WatchLoss for the
// cost). The stream goes through via in turn, reconnecting to the next after each end (default:
// the gateway that granted the lease); it is reopened, pausing 100 ms to 5 s, while the lease
// lives, and a reopened stream confirms that the lease survived the gap (the gateway refuses it
// with 410 otherwise, which ends the lease with EndGone). It is closed once the lease ends. A
// gateway without events streams (404) leaves Done to renewals. Watch returns at once; it does
// nothing when the lease is watched already or has ended. Watching tells whether the stream is
// open. A release elsewhere with the lease's token counts as its own: no loss is told, and the
// next renewal finds it gone.
//
// The HTTP client of the gateways must not time out whole requests (http.Client.Timeout): a
// stream lasts as long as the lease. One with such a timeout is reopened after each.
func (l *Lease) Watch(via ...*Gateway) {
	if len(via) == 0 {
		via = []*Gateway{l.client}
	}
	t := watchTarget{calls: l.calls, name: l.Lock, token: l.Token, fence: l.Fence}
	if _, ok := l.calls.(*electionCalls); ok {
		// An election's stream takes no token: the watcher looks for the lead's fence, and a
		// renewal confirms a loss its state only suggests.
		t.token, t.election = "", true
		t.confirm = func(ctx context.Context) error { return l.Renew(ctx, 0) }
		t.forced = func(ctx context.Context, gw *Gateway) bool {
			_, err := l.calls.renew(ctx, gw, l, 0, nil) // not RenewVia: its 410 would end the lease first
			return forcedAway(err)
		}
	}
	l.watch([]watchTarget{t}, via)
}
