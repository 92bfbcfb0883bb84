package redisson

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// Redisson's key, field and channel names, in one place. Sources (redisson/redisson 66863978):
// RedissonObject.java (prefixName, suffixName), RedissonBaseLock.java (getLockName,
// getUnlockLatchName), RedissonLock.java, RedissonReadLock.java and RedissonWriteLock.java
// (getChannelName, getWriteLockName, getReadWriteTimeoutNamePrefix, getKeyPrefix).

// prefixName is RedissonObject.prefixName: `p:{name}`, or `p:name` when name holds a `{` (so
// the name's own hash tag decides the slot). Either way the result shares name's Cluster slot.
func prefixName(p, name string) string {
	if strings.Contains(name, "{") {
		return p + ":" + name
	}
	return p + ":{" + name + "}"
}

// suffixName is RedissonObject.suffixName: `{name}:s`, or `name:s` when name holds a `{`.
func suffixName(name, s string) string {
	if strings.Contains(name, "{") {
		return name + ":" + s
	}
	return "{" + name + "}:" + s
}

// lockChannel is RedissonLock.getChannelName: where an RLock's releases are announced.
func lockChannel(name string) string { return prefixName("redisson_lock__channel", name) }

// rwlockChannel is RedissonReadLock/RedissonWriteLock.getChannelName: one channel for both halves.
func rwlockChannel(name string) string { return prefixName("redisson_rwlock", name) }

// unlockLatchName is RedissonBaseLock.getUnlockLatchName: the key where an unlock script leaves
// its result for a retry of the same request.
func unlockLatchName(name, requestID string) string {
	return prefixName("redisson_unlock_latch", name) + ":" + requestID
}

// holderField is RedissonBaseLock.getLockName: `<instance id>:<thread id>`, a holder's hash field
// (a reader's too).
func holderField(id string, threadID int64) string {
	return id + ":" + strconv.FormatInt(threadID, 10)
}

// writerField is RedissonWriteLock.getLockName (= RedissonReadLock.getWriteLockName): the
// writer's field, `<instance id>:<thread id>:write`.
func writerField(id string, threadID int64) string { return holderField(id, threadID) + ":write" }

// readTimeoutPrefix is RedissonReadLock.getReadWriteTimeoutNamePrefix: read hold k of the reader
// field f expires with the string key `{name}:f:rwlock_timeout:k`.
func readTimeoutPrefix(name, field string) string {
	return suffixName(name, field) + ":rwlock_timeout"
}

// readKeyPrefix is RedissonReadLock.getKeyPrefix: the timeout prefix up to the reader's field
// (`{name}`, or name itself when it holds a `{`), from which the unlock and renewal scripts build
// every reader's timeout keys. Java splits on ":"+field and keeps the first part.
func readKeyPrefix(timeoutPrefix, field string) string {
	before, _, _ := strings.Cut(timeoutPrefix, ":"+field)
	return before
}

// newRequestID is ServiceManager.generateId: 16 random bytes in hex, naming one unlock request.
func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
