package lockcore

import (
	"context"
	"errors"
)

// renewDueRedLock is renewDue on RedLock: a majority of counted masters must renew the lease. When
// the renewals can no longer reach a majority while some master still renewed it, the lease lost
// its majority (masters restarted or lost it): it is given back everywhere, so that its holder
// gets 410 on its next call and the lock is free for the next in line, and it leaves the schedule.
// It returns as renewDue does.
func (s *Service) renewDueRedLock(ctx context.Context, ref Ref, lease string) int64 {
	k := s.keys(ref)
	f := s.rl.send(ctx, s.watchdogRenew, []string{k.lock, k.sh, k.shm}, []string{lease})
	renewed := func(r masterReply) bool { return r.counted && status(r) == 1 }
	got := f.collect(zeroTime, s.rl.until(renewed))
	f.rest(nil)
	if count(got, renewed) >= s.rl.quorum {
		s.obs.WatchdogRenewal("renewed")
		due := int64(-1)
		for _, r := range filter(got, renewed) {
			if v := intAt(r, 1); due < 0 || v < due {
				due = v
			}
		}
		return due
	}
	if _, err := s.rl.refusal(got, renewed); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return -1
		}
		s.failures.Add(1)
		s.obs.WatchdogRenewal("error")
		s.log.Warn("watchdog renewal failed; retrying", ref.Kind.String(), ref.Name, "err", err, "failures", s.failures.Load())
		return -1
	}
	if count(got, func(r masterReply) bool { return status(r) == 1 }) == 0 {
		s.obs.WatchdogRenewal("ended") // released, past its max hold, or run out: nothing to renew
		return 0
	}
	s.obs.WatchdogRenewal("lost")
	s.log.Warn("watchdog lease lost its majority of RedLock masters; given back", ref.Kind.String(), ref.Name, "lease", lease)
	s.giveBackEverywhere(ctx, Lease{Lock: ref.Name, Kind: ref.Kind, ID: lease})
	return 0
}

// giveBackEverywhere takes every hold and queue entry of l off every master (dequeue.lua, which
// hands what that frees to the next in line), on RedLock when l lost its majority.
func (s *Service) giveBackEverywhere(ctx context.Context, l Lease) {
	_, err := s.runWithKeys(context.WithoutCancel(ctx), s.dequeue, l.Ref(), []string{s.keys(l.Ref()).ticket("")}, l.ID, "0", "0")
	if err != nil {
		s.log.Warn("giving back a lease that lost its majority failed; its holds run out with their TTL", l.Kind.String(), l.Lock, "err", err)
	}
}
