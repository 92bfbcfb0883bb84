package lockcore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// AcquireRequest asks for a lock. Validation of its ranges is the caller's; lockcore checks only
// what needs the token.
type AcquireRequest struct {
	Lock     string
	Owner    string
	TTL      time.Duration
	Wait     time.Duration // 0: try once
	Watchdog bool
	// MaxHold bounds a watchdog lease: it is not renewed past MaxHold after its grant.
	MaxHold time.Duration
	// Token, when set, re-enters the lease it names instead of asking for a new one.
	Token string
	// Queued, when set, is called once when a waiting request has joined the lock's queue and
	// parks. The HTTP layer uses it to move a long-poll off its server goroutine; it must not block.
	Queued func()
}

// Grant is a held lease as the caller should see it.
type Grant struct {
	Lease
	Token     string
	TTL       time.Duration
	ExpiresAt time.Time // conservative: measured from before the Redis call
	Holds     int64
	Watchdog  bool
	Reentered bool // true when an existing lease was re-entered rather than newly granted
}

// Acquire grants req.Lock to a new lease, or re-enters the lease req.Token names.
//
// It returns a *HeldError (ErrHeld) when another lease holds the lock, ErrLeaseLost when the
// re-entered lease no longer holds it, ErrInvalidToken or ErrInvalid for a bad token, and
// ErrUnavailable when Redis does not answer. If ctx ends after Redis granted the lock, the grant is
// undone before returning ctx's error, so a client that went away holds nothing.
func (s *Service) Acquire(ctx context.Context, req AcquireRequest) (Grant, error) {
	if req.Token == "" && req.Wait > 0 {
		return s.acquireWaiting(ctx, req)
	}
	var (
		g   Grant
		err error
	)
	if req.Token != "" {
		g, err = s.reenterLease(ctx, req)
	} else {
		g, err = s.acquireNew(ctx, req)
	}
	if err != nil {
		return Grant{}, err
	}
	return s.settle(ctx, g, ctx.Err)
}

// settle finishes a grant: a new watchdog lease is enrolled for renewal, and g is undone when
// left reports that the caller went away meanwhile (left's error is then returned).
func (s *Service) settle(ctx context.Context, g Grant, left func() error) (Grant, error) {
	if g.Watchdog && !g.Reentered {
		if err := s.enroll(ctx, g); err != nil {
			s.undo(ctx, g) // a watchdog lease nobody would renew is worse than none
			return Grant{}, err
		}
	}
	if err := left(); err != nil {
		s.undo(ctx, g)
		return Grant{}, err
	}
	return g, nil
}

// acquireNew tries once: the lock goes to a new lease if it is free and nobody is queued.
func (s *Service) acquireNew(ctx context.Context, req AcquireRequest) (Grant, error) {
	lease := uuid.NewString()
	start := time.Now()
	r, err := s.runAcquire(ctx, req, lease, "try", 0)
	if err != nil {
		return Grant{}, err
	}
	if r.status == acquireHeld {
		return Grant{}, &HeldError{Lock: req.Lock, RetryAfter: r.pttl}
	}
	return s.newGrant(req, lease, r.fence, start), nil
}

func (s *Service) newGrant(req AcquireRequest, lease string, fence int64, start time.Time) Grant {
	l := Lease{Lock: req.Lock, Owner: req.Owner, ID: lease, Fence: fence}
	return Grant{Lease: l, Token: s.tokens.Mint(l), TTL: req.TTL, ExpiresAt: start.Add(req.TTL), Holds: 1, Watchdog: req.Watchdog}
}

// acquireReply is acquire.lua's reply.
type acquireReply struct {
	status int64 // acquireHeld, acquireGranted or acquireQueued
	fence  int64
	pttl   time.Duration // the holder's remaining TTL (held, queued)
	score  int64         // arrival to keep when queueing again (queued)
}

const (
	acquireHeld    = 0
	acquireGranted = 1
	acquireQueued  = 2
)

// runAcquire runs acquire.lua in mode "try" or "wait"; score is the arrival to keep (0: now).
func (s *Service) runAcquire(ctx context.Context, req AcquireRequest, lease, mode string, score int64) (acquireReply, error) {
	reply, err := s.exec(ctx, s.acquire, s.keys(req.Lock).all(), []string{
		lease, ms(req.TTL), req.Owner, flag(req.Watchdog), mode, s.room.replica,
		s.livenessMs, s.claimMs, s.chanPrefix, strconv.FormatInt(score, 10), ms(req.MaxHold),
	})
	if err != nil {
		return acquireReply{}, err
	}
	r, err := ints(reply)
	if err != nil || len(r) < 2 || (r[0] == acquireQueued && len(r) != 3) {
		return acquireReply{}, fmt.Errorf("acquire %q: unexpected reply %v: %w", req.Lock, r, err)
	}
	out := acquireReply{status: r[0]}
	switch r[0] {
	case acquireGranted:
		out.fence = r[1]
	case acquireQueued:
		out.pttl, out.score = time.Duration(max(r[1], 0))*time.Millisecond, r[2]
	default:
		out.pttl = time.Duration(max(r[1], 0)) * time.Millisecond
	}
	return out, nil
}

func (s *Service) reenterLease(ctx context.Context, req AcquireRequest) (Grant, error) {
	l, err := s.tokens.Parse(req.Token, req.Lock)
	if err != nil {
		return Grant{}, err
	}
	if l.Owner != req.Owner {
		return Grant{}, fmt.Errorf("%w: owner %q does not match the lease token's owner %q", ErrInvalid, req.Owner, l.Owner)
	}
	start := time.Now()
	k := s.keys(req.Lock)
	reply, err := s.exec(ctx, s.reenter, []string{k.lock, k.q, k.qm}, []string{l.ID, ms(req.TTL), s.chanPrefix})
	if err != nil {
		return Grant{}, err
	}
	r, err := ints(reply)
	if err != nil || (len(r) != 1 && len(r) != 3) {
		return Grant{}, fmt.Errorf("reenter %q: unexpected reply %v: %w", req.Lock, r, err)
	}
	if r[0] == 0 {
		return Grant{}, fmt.Errorf("%w: lock %q, lease %s", ErrLeaseLost, req.Lock, l.ID)
	}
	return Grant{Lease: l, Token: req.Token, TTL: req.TTL, ExpiresAt: start.Add(req.TTL), Holds: r[0],
		Watchdog: r[2] == 1, Reentered: true}, nil
}

// undo gives back one hold of g, on a context of its own: the caller's may have ended.
func (s *Service) undo(ctx context.Context, g Grant) {
	_, _ = s.releaseLease(context.WithoutCancel(ctx), g.Lease)
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
