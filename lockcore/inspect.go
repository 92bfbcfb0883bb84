package lockcore

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// Inspect reads the state of ref; a non-empty token also asks whether its lease holds. It returns
// ErrInvalidToken for a bad token (before touching Redis) and ErrUnavailable when Redis does not
// answer.
func (s *Service) Inspect(ctx context.Context, ref Ref, token string) (State, error) {
	if err := s.offered(ref); err != nil {
		return State{}, err
	}
	lease := ""
	if token != "" {
		l, err := s.tokens.Parse(token, ref)
		if err != nil {
			return State{}, err
		}
		lease = l.ID
	}
	k := s.keys(ref)
	reply, err := s.dep.run(ctx, call{script: scripts.inspect, keys: []string{k.lock, k.q, k.qd, k.sh, k.shm, k.rs},
		args: []string{lease, string(s.space.layoutOf(ref))}})
	if err != nil {
		return State{}, err
	}
	r := replyValues(reply)
	st, ok := readState(ref, r)
	if !ok {
		return State{}, unexpectedReply("inspect", ref.Name, r, nil)
	}
	if token != "" {
		yours := r[2] == int64(1)
		st.Yours = &yours
	}
	return st, nil
}

// LongHolds returns up to limit holds older than Options.LongHold, oldest first, and takes the
// entries of holds that ended out of the aged zset (none where the deployment lacks the report).
func (s *Service) LongHolds(ctx context.Context, limit int) ([]OldHold, error) {
	if s.ledgers.long == nil {
		return nil, nil
	}
	return s.ledgers.long.olderThan(ctx, s.ledgers.long.threshold, limit)
}

// LongestHeld returns up to limit of the oldest holds that may outlive Options.LongHold (watchdog
// leases and multi-locks, long TTLs, leases renewed late in life; see long_holds.go), whatever
// their age, oldest first.
func (s *Service) LongestHeld(ctx context.Context, limit int) ([]OldHold, error) {
	if s.ledgers.long == nil {
		return nil, nil
	}
	return s.ledgers.long.olderThan(ctx, 0, limit)
}

// MostContended returns up to n names with the most 409s and waits on this replica over the last
// one to two minutes, most first.
func (s *Service) MostContended(n int) []Contended {
	c := &s.ledgers.contention
	c.mu.Lock()
	c.turn(time.Now())
	counts := map[Ref]int64{}
	for ref, k := range c.prev {
		counts[ref] += k
	}
	for ref, k := range c.cur {
		counts[ref] += k
	}
	c.mu.Unlock()
	out := make([]Contended, 0, len(counts))
	for ref, k := range counts {
		out = append(out, Contended{ref, k})
	}
	slices.SortFunc(out, func(a, b Contended) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Ref.Name, b.Ref.Name))
	})
	return out[:min(len(out), n)]
}
