package redisson

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// ReadWriteLock is an RReadWriteLock (RedissonReadWriteLock.java): one hash named name with a
// `mode` field (read | write), the writer's field `<id>:<thread>:write` and one field per reader
// `<id>:<thread>` counting its holds; each read hold k also has its own expiring key
// `{name}:<reader field>:rwlock_timeout:<k>`. Both halves announce releases on
// redisson_rwlock:{name}: 0 when a read unlock deletes the hash, 1 when a write unlock does.
type ReadWriteLock struct {
	c    *Client
	name string
}

// ReadLock returns thread threadID's read lock (RedissonReadLock.java). Readers share; the
// thread holding the write lock may also take the read lock (downgrade), not the other way round.
func (rw *ReadWriteLock) ReadLock(threadID int64) *Lock {
	return newLock(rw.c, rw.name, threadID, readLock{})
}

// WriteLock returns thread threadID's write lock (RedissonWriteLock.java): exclusive, reentrant.
func (rw *ReadWriteLock) WriteLock(threadID int64) *Lock {
	return newLock(rw.c, rw.name, threadID, writeLock{})
}

// readLock is the protocol of RedissonReadLock.java.
type readLock struct{}

func (readLock) channel(name string) string { return rwlockChannel(name) }

func (readLock) field(id string, threadID int64) string { return holderField(id, threadID) }

func (readLock) tryLock(ctx context.Context, l *Lock, lease time.Duration) (bool, int64, error) {
	keys := []string{l.name, readTimeoutPrefix(l.name, l.field)}
	args := []string{ms(lease), l.field, writerField(l.c.id, l.threadID)}
	return decodeAcquire(readTryLock.Exec(ctx, l.c.rc, keys, args))
}

func (readLock) unlock(ctx context.Context, l *Lock, requestID string) (unlockOutcome, error) {
	timeoutPrefix := readTimeoutPrefix(l.name, l.field)
	keys := []string{l.name, rwlockChannel(l.name), timeoutPrefix, readKeyPrefix(timeoutPrefix, l.field),
		unlockLatchName(l.name, requestID)}
	args := []string{unlockMessage, l.field, l.c.publishCommand(), unlockLatchTimeout}
	return decodeUnlock(readUnlock.Exec(ctx, l.c.rc, keys, args))
}

func (readLock) forceUnlock(ctx context.Context, l *Lock) (bool, error) {
	n, err := readForceUnlock.Exec(ctx, l.c.rc, []string{l.name, rwlockChannel(l.name)},
		[]string{unlockMessage, l.c.publishCommand()}).AsInt64()
	return n == 1, err
}

func (readLock) isLocked(ctx context.Context, l *Lock) (bool, error) {
	n, err := readIsLocked.Exec(ctx, l.c.rc, []string{l.name}, nil).AsInt64()
	return n == 1, err
}

// scheduleRenewal: RedissonReadLock.scheduleExpirationRenewal puts the reader on the read-lock
// watchdog (renewal/ReadLockTask.java), which renews every read-hold key of the instance's readers
// and the hash.
func (readLock) scheduleRenewal(l *Lock) {
	l.c.renewal.reads.add(l.name, l.threadID, l.field, readKeyPrefix(readTimeoutPrefix(l.name, l.field), l.field))
}

// cancelRenewal: RedissonReadLock.cancelExpirationRenewal calls super's first, so a read unlock
// also takes one hold of the same thread off the RLock/write-lock watchdog of this name, as in Java
// (a downgraded writer's write hold can thus stop being renewed).
func (readLock) cancelRenewal(l *Lock, all bool) {
	l.c.renewal.locks.cancel(l.name, l.threadID, all)
	l.c.renewal.reads.cancel(l.name, l.threadID, all)
}

// writeLock is the protocol of RedissonWriteLock.java.
type writeLock struct{}

func (writeLock) channel(name string) string { return rwlockChannel(name) }

func (writeLock) field(id string, threadID int64) string { return writerField(id, threadID) }

func (writeLock) tryLock(ctx context.Context, l *Lock, lease time.Duration) (bool, int64, error) {
	return decodeAcquire(writeTryLock.Exec(ctx, l.c.rc, []string{l.name}, []string{ms(lease), l.field}))
}

func (writeLock) unlock(ctx context.Context, l *Lock, requestID string) (unlockOutcome, error) {
	keys := []string{l.name, rwlockChannel(l.name), unlockLatchName(l.name, requestID)}
	args := []string{readUnlockMessage, ms(l.currentLease()), l.field, l.c.publishCommand(), unlockLatchTimeout}
	return decodeUnlock(writeUnlock.Exec(ctx, l.c.rc, keys, args))
}

func (writeLock) forceUnlock(ctx context.Context, l *Lock) (bool, error) {
	n, err := writeForceUnlock.Exec(ctx, l.c.rc, []string{l.name, rwlockChannel(l.name)},
		[]string{readUnlockMessage, l.c.publishCommand()}).AsInt64()
	return n == 1, err
}

// isLocked is RedissonWriteLock.isLocked: HGET name mode == "write".
func (writeLock) isLocked(ctx context.Context, l *Lock) (bool, error) {
	mode, err := l.c.rc.Do(ctx, l.c.rc.B().Hget().Key(l.name).Field("mode").Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return false, err
	}
	return mode == "write", nil
}

// The writer is renewed like an RLock (RedissonWriteLock inherits RedissonLock's
// scheduleExpirationRenewal), with its `:write` field.
func (writeLock) scheduleRenewal(l *Lock) { l.c.renewal.locks.add(l.name, l.threadID, l.field, "") }

func (writeLock) cancelRenewal(l *Lock, all bool) { l.c.renewal.locks.cancel(l.name, l.threadID, all) }
