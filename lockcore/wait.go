package lockcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// retryPause is how long a waiter waits before retrying a Redis call that failed.
const retryPause = 50 * time.Millisecond

// waitAs is waitInto for a caller that holds the request and the grant by value (a multi-lock's
// members).
func (s *Service) waitAs(ctx context.Context, req AcquireRequest, lease string) (g Grant, err error) {
	err = s.waitInto(ctx, &req, lease, &g)
	return g, err
}

// waitInto queues for req.Lock as lease and waits up to req.Wait for it, setting *g to the grant:
// a synchronous call bounded by ctx, the wait and the Service's Close, running on the caller's
// goroutine. Its grant is not settled (see Service.finishGrant): a multi-lock's member enrolls no
// watchdog of its own, and the group gives back what it took when its caller leaves.
//
// The waiter registers with this process's waiters before it enqueues in Redis, so a grant
// published right after the enqueue still finds it. Grants are direct hand-offs: the script that
// frees the lock gives it to the queue head (FIFO across replicas) and publishes one message to
// that waiter's replica, which confirms the grant here by setting the waiter's TTL. The
// heartbeat (heartbeat.go) keeps the waiter in line and tells it when Redis lost its entry; a
// waiter rides out Redis errors until its wait ends, queueing again at its original arrival.
//
// On timeout it returns a *HeldError with Waited and a QueueTicket; when ctx ends, ctx's error;
// when the Service closes, a *ShutdownError with a QueueTicket; when Redis is still failing as the
// wait ends, ErrUnavailable. Whenever it returns without a grant the waiter has left the queue,
// and a grant that reached it meanwhile has been passed on.
//
// It and await stay on the waiting goroutine's stack while it waits: see Service.acquire.
func (s *Service) waitInto(ctx context.Context, req *AcquireRequest, lease string, g *Grant) (err error) {
	wt, err := s.newWaitTurn(req, lease)
	if err != nil {
		return err
	}
	defer wt.ended(ctx, g, &err)
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := s.waiters.join(req.ref(), lease)
	if err != nil {
		return err
	}
	defer s.waiters.leave(w)
	wt.awaitSubscription(ctx, w.ready)
	return wt.await(ctx, w, g)
}

// await queues and waits for the lock to be handed to w, then confirms it into *g; it returns
// when that is done or the wait ended (see waitInto). It waits on ctx and on w's events rather
// than on a context made of ctx, the deadline and the Service's context: that would cost each
// waiting request a context, a timer, a channel and a place in two contexts' children (about 430
// bytes more, measured with go run ./bench -only waitmem). The deadline and the Service's Close
// stop w (waiter.stop) instead of being cases of its select: each case of a blocked select holds
// a record of the waiting goroutine (a sudog), and a timer's channel is one more allocation
// (about 250 bytes less per waiting request, same bench). The calls it makes to Redis take a
// context made for the call (waitTurn.waitCtx, waitTurn.callCtx).
func (wt *waitTurn) await(ctx context.Context, w *waiter, g *Grant) error {
	ranOut := time.AfterFunc(time.Until(wt.deadline()), w.stop)
	defer ranOut.Stop()
	queue := true
	var handed handOffTally // RedLock: the masters that handed it the lock since the last confirmation
	defer handed.reset()
	for {
		confirmNow := false
		if queue {
			inLine, err := wt.queue(ctx, g)
			switch {
			case errors.Is(err, errAnswerDue):
				return wt.end(ctx, nil)
			case err != nil:
				return wt.end(ctx, err)
			case !inLine && wt.svc.fresh(*g):
				return nil
			case !inLine: // granted, but too late to answer with it: confirm it again, as a hand-off
				confirmNow = true
			}
			queue = false
		}
		if confirmNow {
			if done, err := wt.confirmOrQueue(ctx, g, &queue); done {
				return err
			}
			continue
		}
		ev := waitEvent{stop: true}
		if !w.stopped.Load() { // once stopped, its one nudge may have been taken already
			select {
			case ev = <-w.events:
			case <-handed.timeout():
				ev = waitEvent{fence: 1} // confirm what was handed over so far
			case <-ctx.Done():
				ev = waitEvent{stop: true}
			}
		}
		if ev.stop {
			// An event that is in wins: a lock that reached us as the wait ran out is ours.
			var in bool
			if ev, in = w.pending(); !in {
				return wt.end(ctx, nil)
			}
		}
		if ev.requeue {
			queue = true
			continue
		}
		if !handed.enough(ev.from, wt.svc.dep.handOffs()) {
			continue
		}
		handed.reset()
		if !ev.since.IsZero() && wt.handedOver(ctx, ev, g) {
			return nil
		}
		if done, err := wt.confirmOrQueue(ctx, g, &queue); done {
			return err
		}
	}
}

// handedOver sets *g to the hold a release this process sent handed to the waiter with its TTL
// (ev, see waiters.handOver): no confirmation round trip, as the gateway that would confirm it is
// the one that gave it its TTL. It reports false, leaving *g, when that release answered too late
// to answer with the hold (see fresh): the waiter confirms it then, which sets its TTL anew.
func (wt *waitTurn) handedOver(ctx context.Context, ev waitEvent, g *Grant) bool {
	s, req := wt.svc, &wt.asked
	l := Lease{Lock: req.Lock, Kind: req.Kind, Owner: req.Owner, ID: wt.lease, Fence: ev.fence, Principal: req.Principal}
	got := Grant{Lease: l, Mode: req.mode(), TTL: req.TTL, ExpiresAt: ev.since.Add(s.dep.validity(req.TTL)), Holds: 1,
		Watchdog: req.Watchdog}
	if !s.fresh(got) {
		return false
	}
	got.Token = s.tokens.Mint(l)
	s.rememberGrant(ctx, *req, got)
	*g = got
	return true
}

// confirmOrQueue confirms the lock handed to the waiter into *g (confirmFor): done with what await
// returns, or not done and *queue set when the claim ran out first (the waiter queues again at
// its arrival).
func (wt *waitTurn) confirmOrQueue(ctx context.Context, g *Grant, queue *bool) (done bool, err error) {
	lost, err := wt.confirmFor(ctx, g)
	switch {
	case errors.Is(err, errAnswerDue): // the wait ran out on the way
		return true, wt.end(ctx, nil)
	case err != nil:
		return true, wt.end(ctx, err)
	case lost: // the claim ran out before we confirmed it: queue again at our arrival
		*queue = true
		return false, nil
	}
	return true, nil
}

// deadline is when the wait runs out.
func (wt *waitTurn) deadline() time.Time { return wt.start.Add(wt.asked.Wait) }

// answerGrace bounds how long after its wait runs out a waiting acquire is answered, whatever Redis
// does (docs/waiting.md, "Answered in time"): a Redis call of the wait still running then (a
// stalled or paused server, a WAIT for replicas that are gone, a failover) is left to finish on
// its own goroutine, and the waiter's leaving of the queue is sent once it has returned, so that
// whatever it granted is passed on.
const answerGrace = 500 * time.Millisecond

// answerBy is when the wait's answer is due at the latest.
func (wt *waitTurn) answerBy() time.Time { return wt.deadline().Add(answerGrace) }

// errAnswerDue: a Redis call of a wait was still running when the wait's answer was due
// (answerBy). It never reaches a caller: the wait ends as one that ran out.
var errAnswerDue = errors.New("a Redis call outlasted the wait's answer")

// waitCtx returns a context that ends when ctx does, the wait runs out or the Service closes,
// for a call the wait makes; release it once the call returned.
func (wt *waitTurn) waitCtx(ctx context.Context) (waitCtx context.Context, release func()) {
	waitCtx, cancel := context.WithDeadline(ctx, wt.deadline())
	stop := context.AfterFunc(wt.svc.ctx, cancel)
	return waitCtx, func() { stop(); cancel() }
}

// callCtx is waitCtx for a call that runs on a goroutine of onFreshStack: it carries ctx's values,
// ends when the wait runs out or the Service closes, and when ctx ends through release, which
// onFreshStack calls then. It is not made a child of ctx: that would leave a map of children in
// the request's context for as long as the request waits (about 280 bytes per waiting request,
// measured with go run ./bench -only waitmem).
func (wt *waitTurn) callCtx(ctx context.Context) (callCtx context.Context, release func()) {
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), wt.deadline())
	stop := context.AfterFunc(wt.svc.ctx, cancel)
	return callCtx, func() { stop(); cancel() }
}

// awaitSubscription waits until ready is closed (see the package's awaitSubscription), the wait
// runs out or the Service closes.
func (wt *waitTurn) awaitSubscription(ctx context.Context, ready <-chan struct{}) {
	select {
	case <-ready:
		return
	default:
	}
	waitCtx, release := wt.waitCtx(ctx)
	defer release()
	awaitSubscription(waitCtx, ready)
}

// confirmFor is confirm bounded by the wait (see callCtx), on a goroutine of its own that the
// waiter stops waiting for when the answer is due (errAnswerDue; see onFreshStack).
func (wt *waitTurn) confirmFor(ctx context.Context, g *Grant) (lost bool, err error) {
	type confirmed struct {
		g    Grant
		lost bool
	}
	callCtx, release := wt.callCtx(ctx)
	defer release()
	c, abandoned, err := onFreshStack(ctx, release, wt.answerBy(), func() (c confirmed, err error) {
		c.lost, err = wt.confirm(callCtx, &c.g)
		return c, err
	})
	wt.abandoned = abandoned
	if err == nil && !c.lost {
		*g = c.g
	}
	return c.lost, err
}

// newWaitTurn starts the wait of req as lease, at the place in the queue its queue ticket keeps
// if it has a good one.
func (s *Service) newWaitTurn(req *AcquireRequest, lease string) (*waitTurn, error) {
	wt := &waitTurn{svc: s, asked: *req, lease: lease, start: time.Now()}
	if req.QueueTicket == "" {
		return wt, nil
	}
	id, err := s.tokens.parseTicket(req.QueueTicket, req.Kind, req.Lock, req.Owner, req.Principal)
	switch {
	case errors.Is(err, errTicketIgnored):
		s.log.Warn("queue ticket ignored: the waiter queues as a newcomer", "lock", req.Lock, "err", err)
	case err != nil:
		return nil, err
	}
	wt.resumeID = id
	return wt, nil
}

// started tells the observer and the contention ledger of a wait that stood in the queue.
func (wt *waitTurn) started() {
	wt.queued = true
	wt.svc.obs.WaitStarted(wt.asked.Kind.String())
	wt.svc.ledgers.contention.add(wt.asked.ref(), time.Now())
}

// ended tells the observer how a wait that stood in the queue ended (err), and sets how long its
// grant g waited.
func (wt *waitTurn) ended(ctx context.Context, g *Grant, err *error) {
	if !wt.queued {
		return
	}
	wt.svc.obs.WaitEnded(wt.asked.Kind.String(), waitOutcome(ctx, *err))
	if *err == nil {
		g.Waited = max(time.Since(wt.start), time.Nanosecond)
	}
}

// handOffTally is, on RedLock, the masters that handed a waiter the lock since its last
// confirmation: it confirms once a majority did, or tallyFor after the first one did, so that a
// confirmation sent at the first master's hand-off does not reach masters that have yet to see the
// release (they would refuse it, and the waiter would queue again). One Redis: every hand-off is
// confirmed at once.
type handOffTally struct {
	masters map[int]bool
	timer   *time.Timer
}

// tallyFor bounds how long a waiter waits for a majority's hand-offs after the first (the
// releases reach the masters together: they usually all arrive within a millisecond).
const tallyFor = 20 * time.Millisecond

// enough records that copy from (0: unknown, e.g. the timer's) handed the lock over and says
// whether to confirm now: once quorum copies did.
func (g *handOffTally) enough(from, quorum int) bool {
	if from == 0 || quorum <= 1 {
		return true
	}
	if g.masters == nil {
		g.masters = map[int]bool{}
		g.timer = time.NewTimer(tallyFor)
	}
	g.masters[from] = true
	return len(g.masters) >= quorum
}

func (g *handOffTally) timeout() <-chan time.Time {
	if g.timer == nil {
		return nil
	}
	return g.timer.C
}

func (g *handOffTally) reset() {
	if g.timer != nil {
		g.timer.Stop()
	}
	*g = handOffTally{}
}

// waitOutcome is how a wait that stood in the queue ended, by what it returned.
func waitOutcome(ctx context.Context, err error) WaitOutcome {
	var held *HeldError
	switch {
	case err == nil:
		return WaitGranted
	case errors.As(err, &held):
		return WaitTimedOut
	case ctx.Err() != nil:
		return WaitAbandoned
	}
	return WaitFailed
}

// waitTurn is the state of one waiting acquire.
type waitTurn struct {
	svc   *Service
	asked AcquireRequest
	lease string
	start time.Time
	// arrival is where the waiter stands in the queue (µs, Redis time; 0 until it first queued),
	// kept when it queues again; until then resumeID names the place a queue ticket kept.
	arrival  int64
	resumeID string
	queued   bool // it stood in the queue: a wait the observer hears of
	// abandoned is closed once a Redis call the waiter stopped waiting for (errAnswerDue) has
	// returned; nil when there is none. The call owns arrival until then.
	abandoned <-chan struct{}
}

// queue runs enqueue, bounded by the wait (see waitCtx), on a goroutine of its own (see
// onFreshStack), telling the observer of the wait the first time it stands in the queue, and sets
// *g to the grant enqueue got.
func (wt *waitTurn) queue(ctx context.Context, g *Grant) (inLine bool, err error) {
	type queued struct {
		g      Grant
		inLine bool
	}
	callCtx, release := wt.callCtx(ctx)
	defer release()
	q, abandoned, err := onFreshStack(ctx, release, wt.answerBy(), func() (q queued, err error) {
		q.inLine, err = wt.enqueue(callCtx, &q.g)
		return q, err
	})
	wt.abandoned = abandoned
	switch {
	case err != nil:
	case !q.inLine:
		*g = q.g
	case !wt.queued:
		wt.started()
	}
	return q.inLine, err
}

// enqueue tries for the lock and joins its queue when it is held, retrying Redis errors until
// waitCtx ends (even a failed enqueue may have landed, its reply lost: queueing again keeps the
// arrival). It sets *g to the grant, or reports queued, or the Redis error that outlasted the wait.
func (wt *waitTurn) enqueue(waitCtx context.Context, g *Grant) (queued bool, err error) {
	for {
		callStart := time.Now()
		r, err := wt.svc.runAcquire(waitCtx, &wt.asked, wt.lease, true, wt.arrival, wt.resumeID)
		switch {
		case err == nil && r.status == acquireGranted:
			wt.svc.newGrant(g, &wt.asked, wt.lease, wt.asked.TTL, r, callStart)
			return false, nil
		case err == nil && r.status == acquireReplayed: // a retry of a request that was granted
			// r.pttl: what the first request's lease has left
			wt.svc.newGrant(g, &wt.asked, r.lease, r.pttl, r, callStart)
			return false, nil
		case err == nil && r.status == acquireReplayedLost:
			return false, fmt.Errorf("%w: %s %q: the lease the first request with this Idempotency-Key was granted", ErrLeaseLost, wt.asked.Kind, wt.asked.Lock)
		case err == nil:
			wt.arrival = r.arrival
			wt.svc.waiters.checkBy(wt.svc.keys(wt.asked.ref()).lock, time.Now().Add(r.pttl+time.Millisecond))
			return true, nil
		case !errors.Is(err, ErrUnavailable) || !pause(waitCtx):
			return false, err
		}
	}
}

// onFreshStack runs f on a short-lived goroutine and returns what it returns; when ctx ends
// first, it calls cancel (which must end f's retries) and still waits for f. When by passes first,
// it returns errAnswerDue at once and leaves f to finish: abandoned is then closed once f has
// returned, and what f made in Redis is the caller's to undo after that (see waitTurn.leave).
//
// A waiter blocks (up to LEASEGATE_MAX_WAIT) on a goroutine whose stack never held the calls f
// makes (the Redis client's call chain, the observer's): Go keeps a goroutine's stack at the size
// of its deepest call until a GC shrinks it, which it does only while less than a quarter of it is
// in use. Measured with 10,000 waiting requests (go run ./bench -only waiting): 6 KB less RSS per
// waiter when the Redis call moved here.
func onFreshStack[T any](ctx context.Context, cancel func(), by time.Time, f func() (T, error)) (T, <-chan struct{}, error) {
	var (
		v    T
		err  error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		v, err = f()
	}()
	due := time.NewTimer(time.Until(by))
	defer due.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		cancel()
		<-done
	case <-due.C:
		select {
		case <-done: // an answer that is in wins
		default:
			var zero T
			return zero, done, errAnswerDue
		}
	}
	return v, nil, err
}

// confirm turns the lock handed to this waiter into its grant *g, retrying Redis errors until
// waitCtx ends (confirming is idempotent). It reports lost when the claim ran out first.
func (wt *waitTurn) confirm(waitCtx context.Context, g *Grant) (lost bool, err error) {
	for {
		start := time.Now()
		l := Lease{Lock: wt.asked.Lock, Kind: wt.asked.Kind, Owner: wt.asked.Owner, ID: wt.lease}
		renewed, err := wt.svc.renewLease(waitCtx, l, wt.asked.TTL, start, true)
		switch {
		case err == nil && !wt.svc.fresh(renewed):
			// Confirmed too late to answer with (a slow Redis, a WAIT for replicas): confirm again,
			// which sets its TTL anew, until the wait runs out (then leaving passes it on).
			if waitCtx.Err() != nil {
				return false, errAnswerDue
			}
		case err == nil:
			renewed.Principal = wt.asked.Principal
			renewed.Token = wt.svc.tokens.Mint(renewed.Lease)
			if wt.asked.Kind == KindSemaphore {
				renewed.Permits = wt.asked.Permits
			}
			wt.svc.rememberGrant(waitCtx, wt.asked, renewed)
			*g = renewed
			return false, nil
		case errors.Is(err, ErrLeaseLost):
			return true, nil
		case errors.Is(err, errNotConfirmed):
			// RedLock: fewer than a majority confirmed (the others hold it for someone else, or
			// do not answer). Queue again: that keeps what the majority-to-be handed over, and
			// gives back holds that an earlier waiter should have (see redlock_quorum.go).
			return true, nil
		case !errors.Is(err, ErrUnavailable) || !pause(waitCtx):
			return false, err
		}
	}
}

// pause waits a moment before a retry; it reports false when ctx ended first.
func pause(ctx context.Context) bool {
	t := time.NewTimer(retryPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// end takes a waiter that is done waiting out of the queue, on a context of its own, and says why
// it got no grant: cause if not nil; else the caller left (ctx's error); else the Service closed (a
// *ShutdownError) or the wait ran out (a *HeldError), both with a queue ticket that keeps the
// waiter's place for TicketGrace.
func (wt *waitTurn) end(ctx context.Context, cause error) error {
	s := wt.svc
	ticketID := ""
	if cause == nil && ctx.Err() == nil && wt.abandoned == nil { // its place is kept for its next wait
		ticketID = uuid.NewString()
	}
	r, err := wt.leave(ctx, ticketID)
	var queueTicket string
	if err == nil && r.ticketed {
		queueTicket = s.tokens.mintTicket(ticketClaims{Lock: wt.asked.Lock, Owner: wt.asked.Owner, ID: ticketID,
			Principal: wt.asked.Principal, Kind: wt.asked.Kind.String()})
	}
	switch {
	case cause != nil:
		return cause
	case ctx.Err() != nil:
		return ctx.Err()
	case s.ctx.Err() != nil:
		return &ShutdownError{QueueTicket: queueTicket}
	case errors.Is(err, errAnswerDue): // it leaves the queue after the answer
		r = dequeueReply{handed: true}
	case err != nil:
		return err
	}
	held := &HeldError{Lock: wt.asked.Lock, Kind: wt.asked.Kind, RetryAfter: s.cfg.claimTTL, Waited: time.Since(wt.start), QueueTicket: queueTicket}
	if !r.handed {
		held.RetryAfter = max(r.holdLeft, 0)
	}
	return held
}

// leave takes the waiter out of the queue (dequeue.lua, which passes on a hold handed to it),
// keeping its arrival under ticketID for a queue ticket when that is not "". It is sent once a
// Redis call the waiter abandoned has returned, and waited for until the answer is due: past that
// it returns errAnswerDue and goes on without the caller.
func (wt *waitTurn) leave(ctx context.Context, ticketID string) (dequeueReply, error) {
	s, after := wt.svc, wt.abandoned
	r, _, err := onFreshStack(context.WithoutCancel(ctx), func() {}, wt.answerBy(), func() (dequeueReply, error) {
		if after != nil {
			<-after
		}
		a := dequeueArgs{lease: wt.lease, arrival: wt.arrival}
		if ticketID != "" {
			a.ticket, a.ticketID = s.cfg.ticketGrace, ticketID
		}
		reply, err := s.dep.run(context.WithoutCancel(ctx), a.call(s.lockCall(wt.asked.ref())))
		var r dequeueReply
		if err == nil {
			r, err = decodeDequeue(wt.asked.Lock, reply)
		}
		if err != nil {
			// The entry ages out of the queue within the liveness window once no heartbeat refreshes it.
			s.log.Warn("leaving the wait queue failed", wt.asked.Kind.String(), wt.asked.Lock, "err", err)
		}
		return r, err
	})
	return r, err
}

// Parked returns how many waiting acquires this Service holds now.
func (s *Service) Parked() int { return s.waiters.parked() }

// rememberGrant keeps a waiter's grant for retries of its request with the same Idempotency-Key
// (a grant acquire.lua made keeps itself). A failure only costs a retry its idempotency.
func (s *Service) rememberGrant(ctx context.Context, req AcquireRequest, g Grant) {
	if req.IdempotencyKey == "" {
		return
	}
	k := s.keys(req.ref())
	window := max(s.cfg.idemWindow, g.TTL)
	var err error
	for _, c := range s.dep.copies() {
		err = cmp.Or(err, c.Do(context.WithoutCancel(ctx), c.B().Set().Key(k.idempotency("acquire", "", req.IdempotencyKey)).
			Value(g.ID+" "+req.Owner).Px(window).Build()).Error())
	}
	if err != nil {
		s.log.Warn("remembering a grant for its idempotent retries failed", req.Kind.String(), req.Lock, "err", err)
	}
}
