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
	// Token, when set, re-enters the lease it names instead of asking for a new one.
	Token string
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
	if ctx.Err() != nil {
		s.undo(ctx, g)
		return Grant{}, ctx.Err()
	}
	return g, nil
}

func (s *Service) acquireNew(ctx context.Context, req AcquireRequest) (Grant, error) {
	k := s.keys(req.Lock)
	lease := uuid.NewString()
	start := time.Now()
	reply, err := s.exec(ctx, s.acquire, []string{k.lock, k.fence},
		[]string{lease, ms(req.TTL), req.Owner, flag(req.Watchdog)})
	if err != nil {
		return Grant{}, err
	}
	r, err := ints(reply)
	if err != nil || len(r) != 2 {
		return Grant{}, fmt.Errorf("acquire %q: unexpected reply %v: %w", req.Lock, r, err)
	}
	if r[0] == 0 {
		return Grant{}, &HeldError{Lock: req.Lock, RetryAfter: time.Duration(max(r[1], 0)) * time.Millisecond}
	}
	l := Lease{Lock: req.Lock, Owner: req.Owner, ID: lease, Fence: r[1]}
	return Grant{Lease: l, Token: s.tokens.Mint(l), TTL: req.TTL, ExpiresAt: start.Add(req.TTL), Holds: 1, Watchdog: req.Watchdog}, nil
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
	reply, err := s.exec(ctx, s.reenter, []string{s.keys(req.Lock).lock}, []string{l.ID, ms(req.TTL)})
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

// undo gives back one hold of g, on a context of its own: the caller's has ended.
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
