package lockcore

import (
	"context"
	"fmt"
	"time"
)

// State is a lock as Inspect saw it. Fields after Held are zero when the lock is free.
type State struct {
	Lock     string
	Held     bool
	Owner    string
	Fence    int64
	Holds    int64
	TTL      time.Duration // remaining
	Watchdog bool
	HoldLeft time.Duration // how much longer the watchdog renews the lease
	Waiters  int64
	// Yours is set only when Inspect was given a token: whether that lease holds the lock.
	Yours *bool
}

// Inspect reads lock's state; a non-empty token also asks whether its lease holds the lock. It
// returns ErrInvalidToken for a bad token (before touching Redis) and ErrUnavailable when Redis
// does not answer.
func (s *Service) Inspect(ctx context.Context, lock, token string) (State, error) {
	var lease *Lease
	if token != "" {
		l, err := s.tokens.Parse(token, lock)
		if err != nil {
			return State{}, err
		}
		lease = &l
	}
	st, holder, err := s.inspectLock(ctx, lock)
	if err != nil {
		return State{}, err
	}
	if lease != nil {
		yours := st.Held && holder == lease.ID
		st.Yours = &yours
	}
	return st, nil
}

// inspectLock reads lock's state and the ID of the lease holding it.
func (s *Service) inspectLock(ctx context.Context, lock string) (State, string, error) {
	k := s.keys(lock)
	reply, err := s.exec(ctx, s.inspect, []string{k.lock, k.q, k.qd}, nil)
	if err != nil {
		return State{}, "", err
	}
	if len(reply) != 1 && len(reply) != 8 {
		return State{}, "", fmt.Errorf("inspect %q: unexpected reply of %d elements", lock, len(reply))
	}
	st := State{Lock: lock}
	st.Waiters, _ = reply[0].AsInt64()
	if len(reply) == 1 {
		return st, "", nil
	}
	reply = reply[1:]
	st.Held = true
	holder, _ := reply[0].ToString()
	st.Owner, _ = reply[1].ToString()
	r, err := ints(reply[2:])
	if err != nil {
		return State{}, "", fmt.Errorf("inspect %q: %w", lock, err)
	}
	st.Fence, st.Holds, st.TTL, st.Watchdog = r[0], r[1], time.Duration(r[2])*time.Millisecond, r[3] == 1
	st.HoldLeft = time.Duration(r[4]) * time.Millisecond
	return st, holder, nil
}
