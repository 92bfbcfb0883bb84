package lockcore

import (
	"context"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Redisson's releases wake this process's waiters. A Redisson client's unlock runs none of the
// gateway's scripts: it deletes Redisson's object and publishes on Redisson's channel of the name
// (see luascripts/lib_layout.lua). This process follows those channels for every name shared with
// Redisson, and a message makes the heartbeat check that lock now (if this process has waiters on
// it), which hands it to the head of its line. A message lost (a reconnection, or a publisher this
// process does not hear) costs at most a Heartbeat: the beat names a lock nobody holds any more.
//
// On Redis Cluster, Redisson 3.22+ publishes with SPUBLISH, which only SSUBSCRIBE on the slot's
// node hears, one channel at a time: the deployment follows the names this process waits on
// (deployment.releaseFeed). Every deployment also hears PUBLISH (older Redisson, node-redisson,
// and every Redis that is not a Cluster) through one pattern subscription per prefix.

// redissonChannels are the channel prefixes of Redisson's locks, with the layout each belongs to.
var redissonChannels = [...]struct {
	prefix string
	layout layout
}{
	{"redisson_lock__channel:{", redissonLock},
	{"redisson_rwlock:{", redissonRWLock},
}

// redissonPatterns are the PSUBSCRIBE patterns of every channel of a name rn shares.
func redissonPatterns(rn RedissonNames) []string {
	var out []string
	for _, ch := range redissonChannels {
		prefixes := rn.Locks
		if ch.layout == redissonRWLock {
			prefixes = rn.RWLocks
		}
		for _, p := range prefixes {
			if p == "*" {
				p = ""
			}
			out = append(out, ch.prefix+p+"*")
		}
	}
	return out
}

// releaseChannel is the channel another client announces a release of the lock name on in layout
// l (Redisson's); "" in the gateway's own layout.
func (l layout) releaseChannel(name string) string {
	for _, ch := range redissonChannels {
		if ch.layout == l {
			return ch.prefix + name + "}"
		}
	}
	return ""
}

// redissonName is the lock name a channel of redissonChannels announces, if it is one.
func redissonName(channel string) (string, bool) {
	for _, ch := range redissonChannels {
		if rest, ok := strings.CutPrefix(channel, ch.prefix); ok {
			return strings.CutSuffix(rest, "}")
		}
	}
	return "", false
}

// redissonWakeups is how many Redisson releases may wait to be handled before more are dropped
// (the heartbeat finds what is dropped).
const redissonWakeups = 1024

// followReleases has this process hear Redisson's releases of the names shared with Redisson on
// client (see above), until the Service closes.
func (ws *waiters) followReleases(client rueidis.Client) {
	e := ws.e
	patterns := redissonPatterns(e.space.shared)
	if len(patterns) == 0 {
		return
	}
	names := make(chan string, redissonWakeups)
	e.wg.Go(func() {
		for {
			select {
			case <-e.ctx.Done():
				return
			case name := <-names:
				ws.checkBy(e.space.keys(LockRef(name)).lock, time.Now())
			}
		}
	})
	ws.heardRelease = func(m rueidis.PubSubMessage) {
		if name, ok := redissonName(m.Channel); ok {
			select {
			case names <- name:
			default:
			}
		}
	}
	e.wg.Go(func() {
		for e.ctx.Err() == nil {
			_ = client.Receive(e.ctx, client.B().Psubscribe().Pattern(patterns...).Build(), ws.heardRelease)
			select { // Redis unreachable: again shortly
			case <-e.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// followReleaseFeed follows f (a name's Redisson channel, sharded) until the returned function
// is called, which unsubscribes. Called with ws.mu held, and unfollowed likewise (while this
// process still waits on the name, so the Service's WaitGroup is not done).
func (ws *waiters) followReleaseFeed(f feed) (unfollow func()) {
	e := ws.e
	ctx, cancel := context.WithCancel(e.ctx)
	e.wg.Go(func() {
		for ctx.Err() == nil {
			_ = f.client.Receive(ctx, f.client.B().Ssubscribe().Channel(f.channel).Build(), ws.heardRelease)
			select { // the slot moved, or Redis is unreachable: again shortly
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return func() {
		cancel()
		// Ending Receive leaves the subscription in Redis: SUNSUBSCRIBE it (off the lock).
		e.wg.Go(func() {
			c, stop := context.WithTimeout(context.Background(), time.Second)
			defer stop()
			_ = f.client.Do(c, f.client.B().Sunsubscribe().Channel(f.channel).Build()).Error()
		})
	}
}
