// Package redisson is a Go client of Redisson's lock protocol, for tests: it takes and releases
// Redisson's RLock and RReadWriteLock on the same Redis, with the same keys, hash fields, Lua
// scripts, channels and messages as Java Redisson, so that a test can stand in for a Java process
// sharing a lock name with the gateway (issue #36).
//
// Everything here follows redisson/redisson at 66863978 (4.7.0-62, Aug 2026); each file names the
// Java sources it follows, and scripts.go holds their Lua text byte for byte (so the script SHA1s
// match the ones Java Redisson loads). What it leaves out: replica synchronisation (Redisson's
// syncedEval WAIT), Redisson's command retries, fair locks, and async (listener) waiting.
//
// A Client is one "JVM": its instance id is the first half of every hash field it writes
// (`<id>:<threadId>`), and its subscriptions, wake-ups and watchdog are shared by all its locks, as
// Redisson's are shared by the threads of one process. Thread ids are the caller's: two goroutines
// passing the same id are one Java thread to Redis.
package redisson

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// ErrIllegalMonitorState is returned by Unlock when the lock is not held by the calling thread,
// where Java Redisson throws IllegalMonitorStateException.
var ErrIllegalMonitorState = errors.New("attempt to unlock lock, not locked by current thread")

// ErrClosed is returned by operations that wait after the Client was closed.
var ErrClosed = errors.New("redisson client closed")

// ErrSubscriptionTimeout is returned by Lock when the lock's channel was not subscribed within
// Options.SubscriptionTimeout (Java: RedisTimeoutException "Unable to acquire subscription lock").
var ErrSubscriptionTimeout = errors.New("unable to acquire subscription lock")

// Defaults, from redisson/src/main/java/org/redisson/config/Config.java (lockWatchdogTimeout)
// and BaseConfig.java (subscriptionTimeout).
const (
	DefaultWatchdogTimeout     = 30 * time.Second
	DefaultSubscriptionTimeout = 7500 * time.Millisecond
)

// Options configure a Client. The zero value is Redisson's default configuration on a single
// Redis (or on a Cluster without sharded pub/sub).
type Options struct {
	// WatchdogTimeout is Config.lockWatchdogTimeout: the lease of a hold taken without one, and
	// three times the watchdog's renewal period. Default 30 s.
	WatchdogTimeout time.Duration
	// Sharded makes the client SSUBSCRIBE and its scripts SPUBLISH, as Redisson 3.22+ does on a
	// Redis Cluster 7+ (ShardedSubscriptionMode AUTO, PublishSubscribeService.getPublishCommand);
	// otherwise SUBSCRIBE and PUBLISH. Sharded and classic pub/sub do not reach each other.
	Sharded bool
	// SubscriptionTimeout bounds Lock's wait for its channel's subscription. Default 7.5 s.
	SubscriptionTimeout time.Duration
	// ID is the instance id (ServiceManager.id, a random UUID per Redisson instance); empty means
	// a fresh random UUID.
	ID string
}

// Client is one Redisson instance on a rueidis client: it hands out lock objects sharing its
// instance id, subscriptions and watchdog. Safe for concurrent use. Close stops its goroutines;
// the rueidis client stays the caller's.
type Client struct {
	rc   rueidis.Client
	id   string
	opts Options

	ctx    context.Context // the Client's lifetime (not a request's): ends on Close, watched by its goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup

	subs    *subscriptions
	renewal *renewals
}

// New returns a Client on c. Give each Client its own rueidis client when several share a process,
// as separate JVMs have separate connections: one connection's UNSUBSCRIBE ends every subscription
// to that channel on it (the Client then subscribes again, waking its waiters to re-check).
func New(c rueidis.Client, opts Options) *Client {
	if opts.WatchdogTimeout <= 0 {
		opts.WatchdogTimeout = DefaultWatchdogTimeout
	}
	if opts.SubscriptionTimeout <= 0 {
		opts.SubscriptionTimeout = DefaultSubscriptionTimeout
	}
	if opts.ID == "" {
		opts.ID = uuid.NewString()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &Client{rc: c, id: opts.ID, opts: opts, ctx: ctx, cancel: cancel}
	cl.subs = newSubscriptions(cl)
	cl.renewal = newRenewals(cl)
	return cl
}

// ID returns the instance id, the first half of every hash field this Client writes.
func (c *Client) ID() string { return c.id }

// Close stops the watchdog and ends the Client's subscriptions, waiting for its goroutines to
// return; waits in progress fail with ErrClosed. Locks held stay in Redis until their leases run
// out, as when a JVM exits. Safe to call twice.
func (c *Client) Close() {
	c.cancel()
	// Whoever found the Client open under one of these locks has done its wg.Add by now, and
	// whoever takes one next finds it closed: Wait cannot race an Add.
	for _, mu := range []*sync.Mutex{&c.subs.mu, &c.renewal.locks.mu, &c.renewal.reads.mu} {
		mu.Lock()
		//lint:ignore SA2001 a barrier: it only waits for whoever holds mu (see above)
		mu.Unlock()
	}
	c.wg.Wait()
}

// Lock returns thread threadID's handle on the RLock name (Redisson's getLock(name)).
func (c *Client) Lock(name string, threadID int64) *Lock {
	return newLock(c, name, threadID, rlock{})
}

// ReadWriteLock returns the RReadWriteLock name (Redisson's getReadWriteLock(name)).
func (c *Client) ReadWriteLock(name string) *ReadWriteLock {
	return &ReadWriteLock{c: c, name: name}
}

// publishCommand is PublishSubscribeService.getPublishCommand: the command the scripts publish with.
func (c *Client) publishCommand() string {
	if c.opts.Sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// closing reports the end of the Client to waits.
func (c *Client) closing() <-chan struct{} { return c.ctx.Done() }
