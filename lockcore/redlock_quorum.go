package lockcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// How the masters' replies become one on RedLock (see redlock.go). Every call goes to every
// master at once and returns as soon as its outcome is settled, so a slow or stalled master slows
// nothing; replies that come later are dealt with as they come.
//
//   - A grant (acquire, a waiter's confirmation, re-entry, renewal) holds when a majority of
//     counted masters made it within its validity: TTL less the time the call took less the drift
//     allowance. Whatever a minority granted to a request that is not waiting is given back at
//     once (late grants too, as they arrive); a waiter keeps what a minority handed it and waits
//     for the rest (see wait.go): the holds its turn brings, master by master.
//   - A refusal (held, lease gone, ...) is answered only when the successes can no longer reach a
//     majority even if every master that did not answer, or does not count, said yes; otherwise
//     the answer is ErrUnavailable. So losing a minority of masters changes no answer, and losing
//     a majority answers ErrUnavailable and never grants.
//   - Fences: every master computes max(its last fence + 1, the gateway's clock), its last fence
//     being that of the lock's hash slot (deployment.fences), so masters that saw the same grants
//     in that slot give the same fence. The fence returned is the greatest a majority
//     gave; when fewer than a majority gave that very fence, it is first written back
//     (redlock_fence.lua) until a majority's last fence is at least it. Any later majority
//     shares a master with that one, which gives a greater fence: fences increase as long as a
//     majority of masters keeps its data.
//
// What RedLock cannot offer: semaphores (a permit granted by a majority does not bound holders by
// the permits: with 5 masters and 2 permits, three leases can each hold a majority, every master
// holding at most two of them), multi-locks, live events and listings. They answer
// ErrNotSupported.

// run runs one call on every master and turns the replies into one.
func (rl *redlock) run(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	switch c.script {
	case scripts.acquire:
		return rl.acquire(ctx, c)
	case scripts.reenter:
		return rl.reenter(ctx, c)
	case scripts.renew:
		reply, err := rl.renew(ctx, c)
		if c.about.waiting && errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", errNotConfirmed, err)
		}
		return reply, err
	case scripts.release:
		return rl.release(ctx, c)
	case scripts.inspect:
		return rl.inspect(ctx, c)
	case scripts.dequeue, scripts.force, scripts.forced:
		return rl.anyMajority(ctx, c)
	case scripts.watchdogSchedule:
		return rl.schedule(ctx, c)
	case scripts.watchdogRenew:
		return rl.renewDue(ctx, c)
	}
	return nil, fmt.Errorf("%w: %s on RedLock", ErrNotSupported, c.script.name)
}

// each runs c on every master and acts on each reply as it comes; it returns once a majority of
// counted masters answered, or after within (a stalled master holds up nothing).
func (rl *redlock) each(ctx context.Context, c call, within time.Duration, act func(int, []rueidis.RedisMessage, error)) {
	f := rl.send(ctx, c)
	handle := func(r masterReply) {
		if reply, err := r.res.ToArray(); err == nil {
			act(r.m.i+1, reply, nil)
		}
	}
	got := f.collect(time.Now().Add(within), func(got []masterReply, _ int) bool { return tallyCounted(got) >= rl.quorum })
	for _, r := range got {
		handle(r)
	}
	f.rest(handle)
}

// acquire: acquire.lua's reply (see acquireReply); args as runAcquire gives them. A grant is a
// majority for one lease: the request's new one, or (a retry with an Idempotency-Key) the lease
// its first call was granted, which a master that lost or never had the key would not know of.
// Grants of the request's new lease that do not stand are given back.
func (rl *redlock) acquire(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	lease, waiting, want, ttl := c.about.lease, c.about.waiting, c.about.mode, c.about.ttl
	validUntil := time.Now().Add(ttl - drift(ttl))
	leaseOf := func(r masterReply) string {
		switch statusOf(r) {
		case acquireGranted:
			return lease
		case acquireReplayed:
			arr, _ := r.res.ToArray()
			l, _ := arr[2].ToString()
			return l
		}
		return ""
	}
	winner := func(got []masterReply) (string, int) {
		counts := map[string]int{}
		best, n := "", 0
		for _, r := range got {
			if l := leaseOf(r); r.counted && l != "" {
				if counts[l]++; counts[l] > n {
					best, n = l, counts[l]
				}
			}
		}
		return best, n
	}
	f := rl.send(ctx, c)
	got := f.collect(validUntil, func(got []masterReply, pending int) bool {
		_, n := winner(got)
		answered := tallyCounted(got)
		return n >= rl.quorum || (n+pending < rl.quorum && (answered >= rl.quorum || answered+pending < rl.quorum))
	})
	giveBack := func(r masterReply) { // a grant of the request's new lease that does not stand
		if statusOf(r) == acquireGranted {
			rl.giveBack(r.m, releaseArgs{lease: lease, which: want}.call(c.on))
		}
	}
	win, n := winner(got)
	wins := func(r masterReply) bool { return r.counted && leaseOf(r) == win }
	if n >= rl.quorum && time.Now().Before(validUntil) {
		if win != lease { // a replay: the first call's lease, with what a majority has left of it
			rl.onEach(got, giveBack)
			f.rest(giveBack)
			return rl.quorumTTL(only(got, wins), 3), nil
		}
		if rep, err := rl.agreeOnFence(ctx, c.on, lease, only(got, wins), validUntil); err == nil {
			rl.adoptElsewhere(f, got, c.on, lease, ms(ttl), rep, func(r masterReply) bool { return statusOf(r) == acquireQueued })
			return rep, nil
		}
	}
	if waiting {
		f.rest(nil)
		queued := func(r masterReply) bool { return r.counted && statusOf(r) == acquireQueued }
		if tally(got, queued) == 0 || tallyCounted(got) < rl.quorum {
			return nil, rl.unavailable(got)
		}
		rep := mostCommon(got, queued)
		arrival, _ := rep[2].AsInt64()
		rl.giveWayToEarlier(got, c.on, lease, strconv.FormatInt(arrival, 10))
		return rep, nil
	}
	rl.onEach(got, giveBack)
	f.rest(giveBack)
	return rl.refusal(got, func(r masterReply) bool { return r.counted && leaseOf(r) != "" })
}

// reenter: reenter.lua's reply {holds, fence, wd, ttl, used} | a refusal; the TTL a majority
// has (a retry's replay answers what each master has left).
func (rl *redlock) reenter(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	lease, want, ttl := c.about.lease, c.about.mode, c.about.ttl
	validUntil := time.Now().Add(ttl - drift(ttl))
	entered := func(r masterReply) bool { return r.counted && arrayLen(r) >= 4 }
	f := rl.send(ctx, c)
	got := f.collect(validUntil, rl.until(entered))
	if tally(got, entered) >= rl.quorum && time.Now().Before(validUntil) {
		f.rest(nil)
		return rl.quorumTTL(only(got, entered), 3), nil
	}
	undo := func(r masterReply) { // the hold this call added, where it did
		if arrayLen(r) >= 4 {
			rl.giveBack(r.m, releaseArgs{lease: lease, which: want}.call(c.on))
		}
	}
	if !c.about.idempotent { // with an Idempotency-Key the client's retry replays the re-entry instead
		rl.onEach(got, undo)
		f.rest(undo)
	} else {
		f.rest(nil)
	}
	return rl.refusal(got, entered)
}

// onEach runs handle on each reply in got that is no error, each on a goroutine of its own, and
// does not wait for them: for what the answer need not wait for.
func (rl *redlock) onEach(got []masterReply, handle func(masterReply)) {
	for _, r := range got {
		if r.res.Error() == nil {
			rl.late.Add(1)
			go func() {
				defer rl.late.Done()
				handle(r)
			}()
		}
	}
}

// quorumTTL returns, of replies (a majority's, the TTL at index i), the one with the longest TTL
// that a majority of masters has: the quorum-th longest.
func (rl *redlock) quorumTTL(replies []masterReply, i int) []rueidis.RedisMessage {
	slices.SortFunc(replies, func(a, b masterReply) int { return cmp.Compare(intAt(b, i), intAt(a, i)) })
	return dropErr(replies[min(rl.quorum, len(replies))-1].res.ToArray())
}

// renew: renew.lua's reply {holds, fence, ttl, wd, shared, used, size} | {0}. A waiter's
// confirmation is a renewal too: its fence is agreed on as a new grant's. A renewal that keeps the
// lease's TTL (ttl 0) answers the TTL a majority has.
func (rl *redlock) renew(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	start, lease, ttl := time.Now(), c.about.lease, c.about.ttl
	deadline := start.Add(3 * time.Second) // TTL unknown before the reply (0: keep the lease's)
	if ttl > 0 {
		deadline = start.Add(ttl - drift(ttl))
	}
	renewed := func(r masterReply) bool { return r.counted && arrayLen(r) == 7 }
	f := rl.send(ctx, c)
	got := f.collect(deadline, rl.until(renewed))
	if tally(got, renewed) >= rl.quorum {
		rep, err := rl.agreeOnFence(ctx, c.on, lease, only(got, renewed), deadline)
		if err != nil {
			f.rest(nil)
			return nil, err
		}
		if ttl == 0 {
			rep = rl.quorumTTL(only(got, renewed), 2)
		}
		ttlMs, _ := rep[2].AsInt64()
		rl.adoptElsewhere(f, got, c.on, lease, strconv.FormatInt(ttlMs, 10), rep, func(r masterReply) bool { return statusOf(r) == 0 })
		if left := time.Duration(ttlMs) * time.Millisecond; time.Since(start) >= left-drift(left) {
			return nil, fmt.Errorf("%w: the RedLock masters renewed too late to leave the lease any validity", ErrUnavailable)
		}
		return rep, nil
	}
	f.rest(nil)
	rep, err := rl.refusal(got, renewed)
	if err == nil && !c.about.waiting {
		// The lease is lost: what a minority of masters still holds of it goes too, so that the
		// lock is free for the next in line.
		rl.dequeueEverywhere(ctx, c.on, lease)
	}
	return rep, err
}

// release: release.lua's reply {holds, shared} | {0, watchdog, shared} | {-1}: the most common
// count left among a majority. A master where the lease holds nothing may still have it in line
// (a waiter a majority granted before this master handed it the lock): there the lease leaves the
// line (dequeue.lua, which also gives back a hand-off that lands meanwhile).
func (rl *redlock) release(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	released := func(r masterReply) bool { return r.counted && statusOf(r) >= 0 }
	f := rl.send(ctx, c)
	got := f.collect(time.Time{}, rl.until(released))
	leave := func(r masterReply) {
		if statusOf(r) == -1 {
			_ = rl.on(r.m, dequeueArgs{lease: c.about.lease}.call(c.on)).Error()
		}
	}
	rl.onEach(got, leave)
	f.rest(leave)
	if tally(got, released) >= rl.quorum {
		return mostCommon(got, released), nil
	}
	return rl.refusal(got, released)
}

// inspect: the state a majority of counted masters agree on (the same holders), else the one most
// of them agree on; the TTL shown is the longest that a majority of the group still has (so an
// unconfirmed hand-off on one master does not shorten it). A majority must answer: it is waited
// for as a release waits for one, and the other masters up to inspectWait from the start.
func (rl *redlock) inspect(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	start := time.Now()
	f := rl.send(ctx, c)
	got := f.collect(time.Time{}, rl.until(func(r masterReply) bool { return r.counted }))
	if rest := start.Add(inspectWait); f.pending > 0 && time.Now().Before(rest) {
		got = append(got, f.collect(rest, func([]masterReply, int) bool { return false })...)
	}
	f.rest(nil)
	if tallyCounted(got) < rl.quorum {
		return nil, rl.unavailable(got)
	}
	type view struct {
		reply []rueidis.RedisMessage
		ttl   time.Duration
		fence int64
	}
	groups := map[string][]view{}
	var order []string
	for _, r := range got {
		arr, err := r.res.ToArray()
		if !r.counted || err != nil {
			continue
		}
		st, ok := readState(Ref{}, replyValues(arr))
		if !ok {
			return arr, nil // the caller reports it
		}
		id, ttl, fence := "", time.Duration(0), int64(0)
		for _, h := range st.holders() {
			id += h.Lease + " "
		}
		if st.Exclusive != nil {
			ttl, fence = st.Exclusive.TTL, st.Exclusive.Fence
		}
		if groups[id] == nil {
			order = append(order, id)
		}
		groups[id] = append(groups[id], view{arr, ttl, fence})
	}
	var best []view
	for _, id := range order {
		if len(groups[id]) > len(best) {
			best = groups[id]
		}
	}
	// The TTL a majority has; and the fence the lease was granted with: the greatest that a
	// majority of masters hold (agreeOnFence wrote it to a majority; a master that gave a lower
	// one may keep it on its hold, and one that handed the lock to a waiter after a majority
	// granted it may hold it under its own, greater, fence until redlock_settle.lua sets the
	// granted one), else the greatest any holds.
	slices.SortFunc(best, func(a, b view) int { return cmp.Compare(b.ttl, a.ttl) })
	ttl := best[min(rl.quorum, len(best))-1].ttl
	top := slices.MaxFunc(best, func(a, b view) int { return cmp.Compare(a.fence, b.fence) }).fence
	held := map[int64]int{}
	for _, v := range best {
		held[v.fence]++
	}
	if agreed := int64(-1); len(held) > 1 {
		for fence, n := range held {
			if n >= rl.quorum && fence > agreed {
				agreed = fence
			}
		}
		if agreed >= 0 {
			top = agreed
		}
	}
	rep := best[min(rl.quorum, len(best))-1]
	for _, v := range best { // the shortest TTL at least ttl, among the views with that fence
		if v.fence == top && v.ttl >= ttl && (rep.fence != top || v.ttl < rep.ttl) {
			rep = v
		}
	}
	return rep.reply, nil
}

// inspectWait bounds how long an inspection waits for every master once a majority answered, past
// which it reads those that answered (a stalled master delays it no longer). Before the majority
// was waited for too, a loaded machine (CI's, running three test packages beside a fuzzer) had a
// holder's inspection answered 503 when three of five masters took longer than this.
const inspectWait = 250 * time.Millisecond

// anyMajority: the reply of the dequeue and force scripts, which every master runs; a majority must
// answer, and the reply that removed most stands for all (of forced.lua's look-up of a force
// release's mark: the latest mark any master keeps).
func (rl *redlock) anyMajority(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	answered := func(r masterReply) bool { return r.counted }
	f := rl.send(ctx, c)
	got := f.collect(time.Time{}, rl.until(answered))
	f.rest(nil)
	if tally(got, answered) < rl.quorum {
		return nil, rl.unavailable(got)
	}
	return greatest(got, answered, 1), nil
}

// agreeOnFence returns, of the replies wins (a majority's grants, the fence at index 1), the one
// with the greatest fence; when fewer than a majority gave that fence, it is first written back to
// every master, and a majority must take it before deadline.
func (rl *redlock) agreeOnFence(ctx context.Context, lc *lockCall, lease string, wins []masterReply, deadline time.Time) ([]rueidis.RedisMessage, error) {
	rep := greatest(wins, func(masterReply) bool { return true }, 1)
	top, _ := rep[1].AsInt64()
	at := tally(wins, func(r masterReply) bool { return intAt(r, 1) == top })
	if at >= rl.quorum {
		return rep, nil
	}
	f := rl.send(ctx, call{script: scripts.redlockFence, keys: []string{lc.keys.lock, lc.keys.fence, lc.keys.shm},
		args: []string{lease, strconv.FormatInt(top, 10), rl.fenceTTLMs}})
	raised := func(r masterReply) bool { return r.counted }
	got := f.collect(deadline, rl.until(raised))
	f.rest(nil)
	if tally(got, raised) < rl.quorum || !time.Now().Before(deadline) {
		return nil, fmt.Errorf("%w: a majority of RedLock masters did not take the grant's fence in time", ErrUnavailable)
	}
	return rep, nil
}

// on runs c on master m alone.
func (rl *redlock) on(m *redlockMaster, c call) rueidis.RedisResult {
	return rl.runner.run(context.Background(), m.client, c.script, c.keys, c.args)
}

// giveBack gives back, on master m, the hold release names: a grant a majority did not make.
func (rl *redlock) giveBack(m *redlockMaster, release call) {
	if err := rl.on(m, release).Error(); err != nil {
		rl.log.Warn("giving back a grant a majority did not make failed; it runs out with its TTL", "master", m.addr, "err", err)
	}
}

// adoptElsewhere runs redlock_settle.lua on the masters whose reply (now, or when it comes) says
// they did not grant lease, a waiter a majority just granted (missed: their reply says so) with
// the reply rep (its fence at index 1): a hold handed to it there meanwhile becomes its own, for
// ttlMs, with rep's fence. It takes over f's replies still to come.
func (rl *redlock) adoptElsewhere(f *fanout, got []masterReply, lc *lockCall, lease, ttlMs string, rep []rueidis.RedisMessage, missed func(masterReply) bool) {
	fence, _ := rep[1].AsInt64()
	c := lc.call(scripts.redlockSettle, nil, lease, ttlMs, strconv.FormatInt(fence, 10))
	adopt := func(r masterReply) {
		if missed(r) {
			if err := rl.on(r.m, c).Error(); err != nil {
				rl.log.Warn("taking a granted waiter out of a master's line failed; its entry ages out", "master", r.m.addr, "err", err)
			}
		}
	}
	rl.onEach(got, adopt)
	f.rest(adopt)
}

// giveWayToEarlier gives back, on each master that granted lease (a waiter queued at arrival) in got, that
// hold if an earlier waiter is in line there (redlock_yield.lua). It waits for them: a yield that
// ran after the waiter's next confirmation could take a hold from a grant a majority just made.
func (rl *redlock) giveWayToEarlier(got []masterReply, lc *lockCall, lease, arrival string) {
	c := lc.call(scripts.redlockYield, nil, lease, arrival)
	var wg sync.WaitGroup
	for _, r := range got {
		if r.res.Error() == nil && statusOf(r) == acquireGranted {
			wg.Go(func() { _ = rl.on(r.m, c).Error() })
		}
	}
	wg.Wait()
}

// until says a collection is settled: ok holds for a majority, or no longer can and enough
// masters answered to tell a refusal from an outage (a majority counted, or the rest cannot make
// one).
func (rl *redlock) until(ok func(masterReply) bool) func([]masterReply, int) bool {
	return func(got []masterReply, pending int) bool {
		n, answered := tally(got, ok), tallyCounted(got)
		return n >= rl.quorum || (n+pending < rl.quorum && (answered >= rl.quorum || answered+pending < rl.quorum))
	}
}

// refusal answers a call whose successes (ok) fell short of a majority: ErrUnavailable when fewer
// than a majority of masters answered and count (a majority lost), or when masters still to answer
// could make a majority (the validity ran out first); else the most common counted refusal. A
// master that answered with an error, or does not count, is no yes.
func (rl *redlock) refusal(got []masterReply, ok func(masterReply) bool) ([]rueidis.RedisMessage, error) {
	pending := len(rl.nodes) - len(got)
	if tallyCounted(got) < rl.quorum || tally(got, ok)+pending >= rl.quorum {
		return nil, rl.unavailable(got)
	}
	return mostCommon(got, func(r masterReply) bool { return r.counted && !ok(r) }), nil
}

func (rl *redlock) unavailable(got []masterReply) error {
	return fmt.Errorf("%w: %d of %d RedLock masters answered and count, %d needed", ErrUnavailable,
		tallyCounted(got), len(rl.nodes), rl.quorum)
}

func tally(got []masterReply, ok func(masterReply) bool) int {
	n := 0
	for _, r := range got {
		if ok(r) {
			n++
		}
	}
	return n
}

func tallyCounted(got []masterReply) int {
	return tally(got, func(r masterReply) bool { return r.counted })
}

func only(got []masterReply, ok func(masterReply) bool) []masterReply {
	var out []masterReply
	for _, r := range got {
		if ok(r) {
			out = append(out, r)
		}
	}
	return out
}

// mostCommon returns, of the replies that satisfy ok, one whose first element is the most common
// (the earliest such group on a tie).
func mostCommon(got []masterReply, ok func(masterReply) bool) []rueidis.RedisMessage {
	counts := map[int64]int{}
	var rep []rueidis.RedisMessage
	best, bestN := int64(0), 0
	for _, r := range got {
		if !ok(r) {
			continue
		}
		st := statusOf(r)
		counts[st]++
		if counts[st] > bestN {
			best, bestN = st, counts[st]
		}
	}
	for _, r := range got {
		if ok(r) && statusOf(r) == best {
			rep, _ = r.res.ToArray()
			break
		}
	}
	return rep
}

// leastAt returns, of the replies that satisfy ok, the one with the least integer at index i.
func leastAt(got []masterReply, ok func(masterReply) bool, i int) []rueidis.RedisMessage {
	var rep []rueidis.RedisMessage
	low := int64(0)
	for _, r := range got {
		if !ok(r) {
			continue
		}
		if v := intAt(r, i); rep == nil || v < low {
			rep, low = dropErr(r.res.ToArray()), v
		}
	}
	return rep
}

// greatest returns, of the replies that satisfy ok, the one with the greatest integer at index i.
func greatest(got []masterReply, ok func(masterReply) bool, i int) []rueidis.RedisMessage {
	var rep []rueidis.RedisMessage
	top := int64(0)
	for _, r := range got {
		if !ok(r) {
			continue
		}
		if v := intAt(r, i); rep == nil || v > top {
			rep, top = dropErr(r.res.ToArray()), v
		}
	}
	return rep
}

func dropErr(arr []rueidis.RedisMessage, _ error) []rueidis.RedisMessage { return arr }

// statusOf is a reply's first integer (-1000 when it has none).
func statusOf(r masterReply) int64 { return intAt(r, 0) }

func intAt(r masterReply, i int) int64 {
	arr, err := r.res.ToArray()
	if err != nil || len(arr) <= i {
		return -1000
	}
	v, err := arr[i].AsInt64()
	if err != nil {
		return -1000
	}
	return v
}

func arrayLen(r masterReply) int {
	arr, err := r.res.ToArray()
	if err != nil {
		return 0
	}
	return len(arr)
}

// schedule: watchdog_schedule.lua's enroll or reschedule, on every master's copy of the
// schedule, a majority of which must take it (so that losing a minority loses no renewal).
func (rl *redlock) schedule(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	f := rl.send(ctx, c)
	took := func(r masterReply) bool { return r.res.Error() == nil }
	got := f.collect(time.Time{}, rl.until(took))
	f.rest(nil)
	if tally(got, took) < rl.quorum {
		return nil, fmt.Errorf("%w: fewer than a majority of RedLock masters took the watchdog schedule", ErrUnavailable)
	}
	return mostCommon(got, took), nil
}

// renewDue: watchdog_renew.lua's reply {1, next due} | {0}; a majority of counted masters must
// renew the lease. When the renewals can no longer reach a majority while some master still
// renewed it, the lease lost its majority (masters restarted or lost it): it is given back
// everywhere, so that its holder gets 410 on its next call and the lock is free for the next in
// line, and errMajorityLost says so.
func (rl *redlock) renewDue(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	f := rl.send(ctx, c)
	renewed := func(r masterReply) bool { return r.counted && statusOf(r) == 1 }
	got := f.collect(zeroTime, rl.until(renewed))
	f.rest(nil)
	if tally(got, renewed) >= rl.quorum {
		return leastAt(got, renewed, 1), nil // the earliest next renewal any of them asks for
	}
	rep, err := rl.refusal(got, renewed)
	if err != nil || tally(got, func(r masterReply) bool { return statusOf(r) == 1 }) == 0 {
		return rep, err // outage; or released, past its max hold, run out: nothing to renew
	}
	rl.dequeueEverywhere(ctx, c.on, c.about.lease)
	return nil, errMajorityLost
}

// dequeueEverywhere takes every hold and queue entry of lease off every master (dequeue.lua,
// which hands what that frees to the next in line), when the lease lost its majority.
func (rl *redlock) dequeueEverywhere(ctx context.Context, lc *lockCall, lease string) {
	if _, err := rl.anyMajority(context.WithoutCancel(ctx), dequeueArgs{lease: lease}.call(lc)); err != nil {
		rl.log.Warn("giving back a lease that lost its majority failed; its holds run out with their TTL", "lock", lc.keys.lock, "err", err)
	}
}
