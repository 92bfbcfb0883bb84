package lockcore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// ForcedHold is one hold a force release took away.
type ForcedHold struct {
	Lease    string // a multi-lock's id for a member held by a multi-lock (see GroupOf)
	Owner    string
	Fence    int64
	Mode     Mode // a semaphore's permits are Shared
	Watchdog bool
}

// ForceResult reports what a force release did.
type ForceResult struct {
	Holds []ForcedHold // every hold removed; none when nothing held it
	// Granted counts the waiters at the head of the line that were handed a hold (with a fence of
	// their own), as a release would have.
	Granted int64
}

// ForceRelease takes every hold off ref, whoever holds it (Redisson's forceUnlock): the exclusive
// holder and every shared holder of a lock, every permit of a semaphore, whatever their reentry
// counts. What that frees goes to the head of the line at once, as on a release. The removed
// leases hold nothing from then on, so their tokens answer ErrLeaseLost everywhere (renew,
// release, re-entry) and their watchdog duties end; a multi-lock that held ref loses it as a member
// that ran out (its next renewal gives back the rest). It needs no token: callers must restrict
// it to operators. It returns ErrUnavailable when Redis does not answer (the outcome is then
// unknown). Do not simply retry it: if the first call did run, the waiter it let in now holds ref,
// and a second force release removes that new holder's hold too. Inspect ref first and force again
// only if the holds to break are still there.
func (s *Service) ForceRelease(ctx context.Context, ref Ref) (ForceResult, error) {
	if err := s.offered(ref); err != nil {
		return ForceResult{}, err
	}
	reply, err := s.dep.run(ctx, s.lockCall(ref).call(scripts.force, nil))
	if err != nil {
		return ForceResult{}, err
	}
	f, err := readForced(reply)
	if err != nil {
		return ForceResult{}, unexpectedReply("force", ref.Name, reply, err)
	}
	s.obs.ForceReleased(ref.Kind.String())
	for _, h := range f.Holds {
		if h.Watchdog && GroupOf(h.Lease) == "" {
			s.watchdog.unschedule(ctx, Lease{Lock: ref.Name, Kind: ref.Kind, ID: h.Lease})
		}
	}
	if ref.Kind == KindElection && len(f.Holds) > 0 { // the leader's end is announced now (`vacant`)
		s.keepElection(ctx, ref)
	}
	return f, nil
}

// leaseLost returns the *LeaseLostError of l, which holds nothing (of mode, when not ""), saying
// whether a force release removed it.
func (s *Service) leaseLost(ctx context.Context, l Lease, mode Mode) error {
	lost := &LeaseLostError{Ref: l.Ref(), Lease: l.ID, Mode: mode}
	var err error
	lost.Forced, lost.ForcedAt, err = s.forcedAt(ctx, l.Ref(), l.ID)
	lost.Unknown = err != nil
	return lost
}

// groupLost returns the *GroupLostError of multi-lock id, which no longer holds members lost,
// saying which of them a force release took (one look-up per member).
func (s *Service) groupLost(ctx context.Context, id string, lost []string) error {
	e := &GroupLostError{ID: id, Locks: lost, Forced: []string{}}
	for _, name := range lost {
		forced, _, err := s.forcedAt(ctx, LockRef(name), id)
		if err != nil {
			e.Forced = nil
			break
		}
		if forced {
			e.Forced = append(e.Forced, name)
		}
	}
	return e
}

// forcedAt tells whether a force release removed lease's holds on ref, and when, from the mark
// force.lua leaves: one read-only look-up, made only once a lease is found gone, never on a
// grant's path.
func (s *Service) forcedAt(ctx context.Context, ref Ref, lease string) (bool, time.Time, error) {
	key := s.keys(ref).forced(lease)
	reply, err := s.dep.run(ctx, call{script: scripts.forced, keys: []string{key}})
	if err != nil {
		return false, time.Time{}, err
	}
	return readForcedMark(reply)
}

// readForcedMark reads forced.lua's reply: {1, at_ms} for a forced lease, {0, 0} otherwise.
func readForcedMark(reply []rueidis.RedisMessage) (forced bool, at time.Time, err error) {
	if len(reply) != 2 {
		return false, time.Time{}, fmt.Errorf("forced: %d elements", len(reply))
	}
	flag, err1 := reply[0].AsInt64()
	ms, err2 := reply[1].AsInt64()
	if err := errors.Join(err1, err2); err != nil {
		return false, time.Time{}, err
	}
	return flag == 1, time.UnixMilli(ms), nil
}

// readForced reads force.lua's reply: {granted, n, [lease, owner, fence, mode, watchdog] * n}.
func readForced(reply []rueidis.RedisMessage) (ForceResult, error) {
	if len(reply) < 2 {
		return ForceResult{}, fmt.Errorf("%d elements", len(reply))
	}
	granted, err := reply[0].AsInt64()
	if err != nil {
		return ForceResult{}, err
	}
	n, err := reply[1].AsInt64()
	if err != nil || n < 0 || int64(len(reply)) != 2+5*n {
		return ForceResult{}, fmt.Errorf("%d holds in %d elements: %v", n, len(reply), err)
	}
	f := ForceResult{Granted: granted, Holds: make([]ForcedHold, 0, n)}
	for r := reply[2:]; len(r) >= 5; r = r[5:] {
		lease, err1 := r[0].ToString()
		owner, err2 := r[1].ToString()
		fence, err3 := r[2].AsInt64()
		mode, err4 := r[3].ToString()
		wd, err5 := r[4].AsInt64()
		for _, err := range []error{err1, err2, err3, err4, err5} {
			if err != nil {
				return ForceResult{}, err
			}
		}
		h := ForcedHold{Lease: lease, Owner: owner, Fence: fence, Mode: Exclusive, Watchdog: wd == 1}
		if mode == "s" {
			h.Mode = Shared
		}
		f.Holds = append(f.Holds, h)
	}
	return f, nil
}
