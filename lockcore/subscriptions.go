package lockcore

import (
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// How grants and events reach this process: its subscriptions to its grant channels (which ones,
// the deployment says: see deployment.listen and ready), and the messages on them.

func (ws *waiters) replicaID() string { return ws.replica }

// follow keeps the subscription f describes alive until the Service closes, on a goroutine of
// its own. rueidis re-subscribes by itself after a lost connection (a Cluster slot's sharded
// subscription ends when the slot moves, and is made again here); messages published during the
// gap are lost, so every (re)subscription has the heartbeat check every lock with local waiters at
// once, and the event streams of its locks read them again. confirmed (if set) runs on each confirmation first.
func (ws *waiters) follow(f feed, confirmed func(first bool)) {
	e := ws.e
	kind := "subscribe"
	if f.sharded {
		kind = "ssubscribe"
	}
	// A command is built for each call: rueidis recycles one once it was sent.
	subscribe := func() rueidis.Completed {
		if f.sharded {
			return f.client.B().Ssubscribe().Channel(f.channel).Build()
		}
		return f.client.B().Subscribe().Channel(f.channel).Build()
	}
	e.wg.Go(func() {
		first := true
		for e.ctx.Err() == nil {
			ctx := rueidis.WithOnSubscriptionHook(e.ctx, func(s rueidis.PubSubSubscription) {
				if s.Kind != kind {
					return
				}
				if confirmed != nil {
					confirmed(first)
				}
				if !first && !f.sharded {
					e.obs.Resubscribed()
				}
				ws.checkAll()
				// The streams of the locks this subscription serves read their locks again; on its
				// first confirmation only those that joined before it (see eventHub.join), since
				// the others read their state after it.
				serves := func(string) bool { return true }
				if f.sharded {
					serves = func(key string) bool { return keySlot(key) == f.slot }
				}
				if first {
					ws.events.resyncEarly(serves)
				} else {
					ws.events.resync(serves)
				}
				first = false
			})
			_ = f.client.Receive(ctx, subscribe(), func(m rueidis.PubSubMessage) { ws.onMessage(m, f.from) })
			select { // Receive returned: Redis unreachable, the slot moved, or unsubscribed; again shortly
			case <-e.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// onMessage runs on the connection's reader goroutine: it must never block. Messages are
// "g <lease> <fence>" (a hold was handed to that waiter), "e <lock key> <ms>" (the lock's, or
// semaphore's, earliest hold runs out in ms; this process has its first waiter) and "v <lock
// key> ..." (a live event of a lock this process streams, see event_hub.go).
func (ws *waiters) onMessage(m rueidis.PubSubMessage, from int) {
	if strings.HasPrefix(m.Message, "v ") {
		ws.events.deliver(m.Message)
		return
	}
	f := strings.Fields(m.Message)
	if len(f) != 3 {
		return
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return
	}
	switch f[0] {
	case "g":
		ws.deliver(f[1], waitEvent{fence: n, from: from})
	case "e":
		if n >= 0 {
			ws.checkBy(f[1], time.Now().Add(time.Duration(n)*time.Millisecond+time.Millisecond))
		}
	}
}

// watchFrom returns a channel closed once messages about the lock with key reach this process
// (see deployment.ready), starting start (if set) first; it fails once the Service is closing.
func (ws *waiters) watchFrom(key string, start func()) (<-chan struct{}, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.e.ctx.Err() != nil {
		return nil, ErrShuttingDown
	}
	if start != nil {
		ws.e.wg.Go(start)
	}
	return ws.e.dep.ready(ws, key), nil
}
