package redisson

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Lock is one thread's handle on a Redisson lock: an RLock (Client.Lock) or one half of an
// RReadWriteLock (ReadWriteLock.ReadLock, WriteLock). Its methods follow RedissonLock.java and
// RedissonBaseLock.java; waiting is in wait.go. Safe for concurrent use, though a Java thread
// would not call it concurrently with itself.
type Lock struct {
	c        *Client
	name     string // getRawName: the hash key
	threadID int64
	field    string // getLockName(threadId): this thread's hash field
	proto    protocol

	mu    sync.Mutex
	lease time.Duration // internalLockLeaseTime: the watchdog timeout, or the last explicit lease
}

// protocol is what tells an RLock, a read lock and a write lock apart: their scripts, channel,
// hash field and watchdog. rlock is below; readLock and writeLock are in rwlock.go.
type protocol interface {
	// channel is getChannelName.
	channel(name string) string
	// field is getLockName.
	field(id string, threadID int64) string
	// tryLock runs tryLockInnerAsync with lease.
	tryLock(ctx context.Context, l *Lock, lease time.Duration) (acquired bool, pttl int64, err error)
	// unlock runs unlockInnerAsync for requestID.
	unlock(ctx context.Context, l *Lock, requestID string) (unlockOutcome, error)
	// forceUnlock runs forceUnlockAsync's script.
	forceUnlock(ctx context.Context, l *Lock) (bool, error)
	// isLocked is isLocked.
	isLocked(ctx context.Context, l *Lock) (bool, error)
	// scheduleRenewal is scheduleExpirationRenewal: the hold just taken goes on the watchdog.
	scheduleRenewal(l *Lock)
	// cancelRenewal is the renewal half of cancelExpirationRenewal: one of the thread's holds
	// leaves the watchdog, or every hold on the name when all is set (forceUnlock).
	cancelRenewal(l *Lock, all bool)
}

func newLock(c *Client, name string, threadID int64, p protocol) *Lock {
	return &Lock{c: c, name: name, threadID: threadID, field: p.field(c.id, threadID), proto: p,
		lease: c.opts.WatchdogTimeout}
}

// Name returns the lock's name, its hash key.
func (l *Lock) Name() string { return l.name }

// Field returns this thread's hash field, `<instance id>:<thread id>` (`...:write` for a writer).
func (l *Lock) Field() string { return l.field }

// unlockOutcome is an unlock script's reply, Java's nullable Boolean.
type unlockOutcome int

const (
	unlockFailed    unlockOutcome = iota // no reply (Java: null, the future failed)
	unlockNotHeld                        // nil: not held by this thread (Java: null too)
	unlockStillHeld                      // 0: a reentrant hold remains (false)
	unlockReleased                       // 1: released (true)
)

// decodeUnlock turns an unlock script's reply into its outcome.
func decodeUnlock(r rueidis.RedisResult) (unlockOutcome, error) {
	n, err := r.AsInt64()
	switch {
	case rueidis.IsRedisNil(err):
		return unlockNotHeld, nil
	case err != nil:
		return unlockFailed, err
	case n == 0:
		return unlockStillHeld, nil
	default:
		return unlockReleased, nil
	}
}

// decodeAcquire turns a tryLockInnerAsync reply into acquired (nil) or the holder's PTTL.
func decodeAcquire(r rueidis.RedisResult) (acquired bool, pttl int64, err error) {
	n, err := r.AsInt64()
	if rueidis.IsRedisNil(err) {
		return true, 0, nil
	}
	return false, n, err
}

// unlockLatchTimeout is the latch ms RedissonBaseLock.unlockInnerAsync(threadId, requestId)
// computes from the default config: (timeout 3000 + retryDelay EqualJitterDelay(1 s, 2 s)
// .calcDelay(retryAttempts 4), which is 1000..2000) x retryAttempts 4 = 16000..20000 ms. The upper end.
const unlockLatchTimeout = "20000"

// Messages on a lock's channel: LockPubSub.UNLOCK_MESSAGE wakes one waiter of each instance,
// READ_UNLOCK_MESSAGE all of them. Published by RLock and read-lock releases (0) and write-lock
// releases (1).
const (
	unlockMessage     = "0"
	readUnlockMessage = "1"
)

// ms renders d as Redisson sends durations: TimeUnit.toMillis, decimal.
func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func (l *Lock) currentLease() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

func (l *Lock) setLease(d time.Duration) {
	l.mu.Lock()
	l.lease = d
	l.mu.Unlock()
}

// Unlock releases one hold of this thread (RedissonBaseLock.unlockAsync0). It returns an error
// wrapping ErrIllegalMonitorState when the thread holds none; a Redis error leaves the outcome
// unknown. The last hold's release publishes on the channel.
func (l *Lock) Unlock(ctx context.Context) error {
	requestID := newRequestID()
	outcome, err := l.proto.unlock(ctx, l, requestID)
	if err == nil {
		// RedissonBaseLock.unlockInnerAsync deletes the latch once the reply is in (best effort).
		_ = l.c.rc.Do(ctx, l.c.rc.B().Del().Key(unlockLatchName(l.name, requestID)).Build()).Error()
	}
	l.cancelExpirationRenewal(false, outcome)
	if err != nil {
		return fmt.Errorf("unlock %q: %w", l.name, err)
	}
	if outcome == unlockNotHeld {
		return fmt.Errorf("%w by node id: %s thread-id: %d", ErrIllegalMonitorState, l.c.id, l.threadID)
	}
	return nil
}

// ForceUnlock deletes the lock whoever holds it and publishes on its channel
// (forceUnlockAsync); for a read or write lock only while the lock is in that mode. It reports
// whether it deleted anything.
func (l *Lock) ForceUnlock(ctx context.Context) (bool, error) {
	l.cancelExpirationRenewal(true, unlockFailed)
	ok, err := l.proto.forceUnlock(ctx, l)
	if err != nil {
		return false, fmt.Errorf("force unlock %q: %w", l.name, err)
	}
	return ok, nil
}

// cancelExpirationRenewal is RedissonLock.cancelExpirationRenewal(threadId, unlockResult) (and
// RedissonReadLock's): it takes the hold off the watchdog and, unless a reentrant hold remains,
// makes the watchdog timeout the lease again.
func (l *Lock) cancelExpirationRenewal(all bool, o unlockOutcome) {
	l.proto.cancelRenewal(l, all)
	if o != unlockStillHeld {
		l.setLease(l.c.opts.WatchdogTimeout)
	}
}

// IsLocked reports whether anyone holds the lock (an RLock: its hash exists; a write lock: mode
// is write; a read lock: RedissonReadLock.isLocked's script).
func (l *Lock) IsLocked(ctx context.Context) (bool, error) { return l.proto.isLocked(ctx, l) }

// IsHeldByCurrentThread reports whether this thread's field is in the hash (isHeldByThread).
func (l *Lock) IsHeldByCurrentThread(ctx context.Context) (bool, error) {
	return l.c.rc.Do(ctx, l.c.rc.B().Hexists().Key(l.name).Field(l.field).Build()).AsBool()
}

// HoldCount returns this thread's reentry count, 0 when it holds none (getHoldCount).
func (l *Lock) HoldCount(ctx context.Context) (int, error) {
	n, err := l.c.rc.Do(ctx, l.c.rc.B().Hget().Key(l.name).Field(l.field).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return int(n), err
}

// RemainTimeToLive returns the hash's PTTL in milliseconds, as Java's remainTimeToLive: -2 when
// the lock does not exist, -1 when it has no expiry.
func (l *Lock) RemainTimeToLive(ctx context.Context) (int64, error) {
	return l.c.rc.Do(ctx, l.c.rc.B().Pttl().Key(l.name).Build()).AsInt64()
}

// rlock is the protocol of RedissonLock.java: a hash of one holder field, channel
// redisson_lock__channel:{name}, message 0.
type rlock struct{}

func (rlock) channel(name string) string { return lockChannel(name) }

func (rlock) field(id string, threadID int64) string { return holderField(id, threadID) }

func (rlock) tryLock(ctx context.Context, l *Lock, lease time.Duration) (bool, int64, error) {
	return decodeAcquire(lockTryLock.Exec(ctx, l.c.rc, []string{l.name}, []string{ms(lease), l.field}))
}

func (rlock) unlock(ctx context.Context, l *Lock, requestID string) (unlockOutcome, error) {
	keys := []string{l.name, lockChannel(l.name), unlockLatchName(l.name, requestID)}
	args := []string{unlockMessage, ms(l.currentLease()), l.field, l.c.publishCommand(), unlockLatchTimeout}
	return decodeUnlock(lockUnlock.Exec(ctx, l.c.rc, keys, args))
}

func (rlock) forceUnlock(ctx context.Context, l *Lock) (bool, error) {
	n, err := lockForceUnlock.Exec(ctx, l.c.rc, []string{l.name, lockChannel(l.name)},
		[]string{unlockMessage, l.c.publishCommand()}).AsInt64()
	return n == 1, err
}

func (rlock) isLocked(ctx context.Context, l *Lock) (bool, error) {
	n, err := l.c.rc.Do(ctx, l.c.rc.B().Exists().Key(l.name).Build()).AsInt64()
	return n == 1, err
}

func (rlock) scheduleRenewal(l *Lock) { l.c.renewal.locks.add(l.name, l.threadID, l.field, "") }

func (rlock) cancelRenewal(l *Lock, all bool) { l.c.renewal.locks.cancel(l.name, l.threadID, all) }
