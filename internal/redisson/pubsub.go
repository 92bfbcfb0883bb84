package redisson

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// How waits hear of releases, after pubsub/PublishSubscribe.java, pubsub/LockPubSub.java and
// RedissonLockEntry.java: per Client one subscription per channel, shared by every wait on it and
// counted (the first wait subscribes, the last one's end unsubscribes), and one semaphore per
// subscription that messages release and waits acquire.
//
// Two things Redisson's Netty connections do for it are done here by hand (see
// NOTES-dependencies.md, "rueidis pub/sub"): a cancelled rueidis Receive leaves the server-side
// subscription in place, so the subscription's end sends UNSUBSCRIBE on its own connection; and
// messages published while a subscription is being remade are lost, so every re-subscription
// releases the waits to try again.

// resubscribeDelay spaces attempts to subscribe again after Receive returned (Redis unreachable,
// the slot moved, or another subscriber of the connection unsubscribed the channel).
const resubscribeDelay = 50 * time.Millisecond

// subscriptions is the Client's LockPubSub.
type subscriptions struct {
	c *Client

	mu      sync.Mutex
	entries map[string]*lockEntry // subscribed or subscribing, by channel
	leaving map[string]*lockEntry // unsubscribing, by channel: the channel's next entry waits for it
}

func newSubscriptions(c *Client) *subscriptions {
	return &subscriptions{c: c, entries: map[string]*lockEntry{}, leaving: map[string]*lockEntry{}}
}

// lockEntry is RedissonLockEntry: one channel's subscription and its latch, a counting semaphore.
// Java keys entries by `<id>:<name>`, here by channel: the same but for a name used both as an
// RLock and an RReadWriteLock, which Java would give one entry for two channels.
type lockEntry struct {
	channel string
	refs    int             // guarded by subscriptions.mu: the waits using the entry
	ctx     context.Context // the subscription's lifetime, ended by stop
	stop    context.CancelFunc
	ready   chan struct{} // closed at the first subscribe confirmation
	done    chan struct{} // closed once the subscription has ended (UNSUBSCRIBE sent)

	resubscribed atomic.Int64 // Receive calls that ended while the entry lived (for tests)

	mu        sync.Mutex
	confirmed bool
	permits   int           // the latch's permits
	waiting   int           // waits blocked on the latch (Semaphore.getQueueLength)
	wake      chan struct{} // closed and replaced when permits are released
}

// subscribe is PublishSubscribe.subscribe: it returns the channel's entry once the channel is
// subscribed, subscribing if this is the channel's first wait. The caller must unsubscribe it.
// It fails with ctx's error, or ErrClosed.
func (s *subscriptions) subscribe(ctx context.Context, channel string) (*lockEntry, error) {
	s.mu.Lock()
	if s.c.ctx.Err() != nil {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	e := s.entries[channel]
	if e == nil {
		e = &lockEntry{channel: channel, ready: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{})}
		e.ctx, e.stop = context.WithCancel(s.c.ctx)
		s.entries[channel] = e
		prev := s.leaving[channel]
		s.c.wg.Add(1)
		go s.follow(e, prev)
	}
	e.refs++
	s.mu.Unlock()

	select {
	case <-e.ready:
		return e, nil
	case <-ctx.Done():
		s.unsubscribe(e)
		return nil, ctx.Err()
	case <-s.c.closing():
		s.unsubscribe(e)
		return nil, ErrClosed
	}
}

// unsubscribe is PublishSubscribe.unsubscribe: the last wait's end ends the subscription.
func (s *subscriptions) unsubscribe(e *lockEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	if s.entries[e.channel] == e {
		delete(s.entries, e.channel)
	}
	s.leaving[e.channel] = e
	e.stop()
}

// follow keeps e's channel subscribed until e stops, then unsubscribes it on the connection it
// was subscribed on. It starts once prev (the channel's previous entry, if any) has unsubscribed,
// so that prev's UNSUBSCRIBE cannot end e's subscription.
func (s *subscriptions) follow(e *lockEntry, prev *lockEntry) {
	defer s.c.wg.Done()
	defer func() {
		s.mu.Lock()
		if s.leaving[e.channel] == e {
			delete(s.leaving, e.channel)
		}
		s.mu.Unlock()
		close(e.done)
	}()
	if prev != nil {
		select {
		case <-prev.done:
		case <-e.ctx.Done():
			return
		}
	}
	sharded := s.c.opts.Sharded
	kind := "subscribe"
	if sharded {
		kind = "ssubscribe"
	}
	confirmed := func(sub rueidis.PubSubSubscription) { // runs on the connection's goroutine
		if sub.Kind == kind && sub.Channel == e.channel {
			e.confirm()
		}
	}
	leave := func(err error, cc rueidis.CommandClient) error {
		if e.ctx.Err() == nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if sharded {
			_ = cc.Do(ctx, cc.B().Sunsubscribe().Channel(e.channel).Build()).Error()
		} else {
			_ = cc.Do(ctx, cc.B().Unsubscribe().Channel(e.channel).Build()).Error()
		}
		return err
	}
	for e.ctx.Err() == nil {
		// A command is built for each call: rueidis recycles one once it was sent.
		cmd := s.c.rc.B().Subscribe().Channel(e.channel).Build()
		if sharded {
			cmd = s.c.rc.B().Ssubscribe().Channel(e.channel).Build()
		}
		ctx := rueidis.WithOnReceiveReturnHook(rueidis.WithOnSubscriptionHook(e.ctx, confirmed), leave)
		_ = s.c.rc.Receive(ctx, cmd, e.onMessage)
		if e.ctx.Err() != nil {
			return
		}
		e.resubscribed.Add(1)
		e.releaseAll() // unsubscribed under our feet: what is published until we are back is lost
		select {
		case <-e.ctx.Done():
			return
		case <-time.After(resubscribeDelay):
		}
	}
}

// confirm marks the entry subscribed; a later confirmation (rueidis re-subscribed after a lost
// connection) releases every wait to try again, since messages in the gap were lost.
func (e *lockEntry) confirm() {
	e.mu.Lock()
	first := !e.confirmed
	e.confirmed = true
	e.mu.Unlock()
	if first {
		close(e.ready)
		return
	}
	e.releaseAll()
}

// onMessage is LockPubSub.onMessage: UNLOCK_MESSAGE (0) releases one permit, READ_UNLOCK_MESSAGE
// (1) as many as there are waits blocked. It must not block: it holds up the connection.
func (e *lockEntry) onMessage(m rueidis.PubSubMessage) {
	if m.Channel != e.channel {
		return
	}
	switch m.Message {
	case unlockMessage:
		e.release(func(int) int { return 1 })
	case readUnlockMessage:
		e.release(func(waiting int) int { return waiting })
	}
}

// releaseAll releases every blocked wait, and one more permit for a wait between two tries.
func (e *lockEntry) releaseAll() { e.release(func(waiting int) int { return waiting + 1 }) }

// release adds n(waiting) permits to the latch (Semaphore.release) and wakes the blocked waits.
func (e *lockEntry) release(n func(waiting int) int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := n(e.waiting)
	if k <= 0 {
		return
	}
	e.permits += k
	close(e.wake)
	e.wake = make(chan struct{})
}

// await is the latch's tryAcquire(d) (acquire() when d < 0): it returns when it took a permit or
// d passed, whichever comes first, and fails only with ctx's error or ErrClosed (closing closed).
func (e *lockEntry) await(ctx context.Context, closing <-chan struct{}, d time.Duration) error {
	var timeout <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	e.mu.Lock()
	for e.permits == 0 {
		wake := e.wake
		e.waiting++
		e.mu.Unlock()
		var err error
		timedOut := false
		select {
		case <-wake:
		case <-timeout:
			timedOut = true
		case <-ctx.Done():
			err = ctx.Err()
		case <-closing:
			err = ErrClosed
		}
		e.mu.Lock()
		e.waiting--
		if timedOut || err != nil {
			e.mu.Unlock()
			return err
		}
	}
	e.permits--
	e.mu.Unlock()
	return nil
}
