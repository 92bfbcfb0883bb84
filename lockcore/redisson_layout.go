package lockcore

import (
	"fmt"
	"strings"
	"time"
)

// The layouts that share a lock's name with Redisson (see layout.go, which chooses a name's layout
// and asks this file only what Redisson's names and objects need).
const (
	redissonLock   layout = 'r' // Redisson's RLock of the same name
	redissonRWLock layout = 'w' // Redisson's RReadWriteLock of the same name
)

// sharedLayoutNames name the shared layouts in messages.
var sharedLayoutNames = map[layout]string{redissonLock: "Redisson RLock", redissonRWLock: "Redisson RReadWriteLock"}

// RedissonNames says which lock names are Redisson's objects: the names that start with one of
// Locks' prefixes are RLocks, with one of RWLocks' RReadWriteLocks ("*" alone: every name).
type RedissonNames struct {
	Locks, RWLocks []string
	// WatchdogTimeout is the Redisson clients' lockWatchdogTimeout (default 30s, Redisson's): the
	// longest TTL a hold of an RReadWriteLock name takes (see admits).
	WatchdogTimeout time.Duration
}

// withDefaults checks rn (see Check) and fills in the default watchdog timeout.
func (rn RedissonNames) withDefaults(keyPrefix string) (RedissonNames, error) {
	if rn.WatchdogTimeout <= 0 {
		rn.WatchdogTimeout = 30 * time.Second
	}
	return rn, rn.Check(keyPrefix)
}

// offeredOnRedLock refuses names shared with Redisson on RedLock: a Redisson lock lives on one
// Redis.
func (rn RedissonNames) offeredOnRedLock() error {
	if rn.any() {
		return fmt.Errorf("%w: locks shared with Redisson are not offered on RedLock (a Redisson RLock lives on one Redis; use standalone, Sentinel or Cluster)", ErrInvalid)
	}
	return nil
}

// any says whether some name is shared with Redisson.
func (rn RedissonNames) any() bool { return len(rn.Locks)+len(rn.RWLocks) > 0 }

// Check refuses prefixes that cannot be told apart: empty ones, one that overlaps the gateway's
// key prefix (the gateway's own keys would be Redisson objects), and a name two prefixes (one of
// each list) could both match, which would leave its layout to chance.
func (rn RedissonNames) Check(keyPrefix string) error {
	for _, list := range [][]string{rn.Locks, rn.RWLocks} {
		for _, p := range list {
			if p == "" {
				return fmt.Errorf("%w: an empty Redisson name prefix (use * for every name)", ErrInvalid)
			}
			if p != "*" && (strings.HasPrefix(keyPrefix, p) || strings.HasPrefix(p, keyPrefix)) {
				return fmt.Errorf("%w: Redisson name prefix %q overlaps the gateway's key prefix %q: the gateway's own keys would be Redisson objects", ErrInvalid, p, keyPrefix)
			}
		}
	}
	for _, a := range rn.Locks {
		for _, b := range rn.RWLocks {
			if a == "*" || b == "*" || strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
				return fmt.Errorf("%w: a name could be both a Redisson RLock (prefix %q) and an RReadWriteLock (prefix %q); make the prefixes disjoint", ErrInvalid, a, b)
			}
		}
	}
	return nil
}

// admits refuses a TTL that Redisson's clients could cut short on r, a lock of layout l. A Redisson reader's watchdog sets
// its read-write lock's TTL to its lockWatchdogTimeout on every renewal, whoever else holds it
// (renewal/ReadLockTask.java): a gateway hold with more time left would outlive Redisson's object,
// and a Redisson writer could enter while it holds. So on RReadWriteLock names a TTL is at most
// that timeout (the gateway's own renewals put the object's expiry back up to its holds').
func (rn RedissonNames) admits(r Ref, l layout, ttl time.Duration) error {
	if l == redissonRWLock && ttl > rn.WatchdogTimeout {
		return fmt.Errorf("%w: %q is shared with Redisson's RReadWriteLock, whose readers' watchdog cuts its TTL to %v: a TTL above it is refused (got %v)",
			ErrInvalid, r.Name, rn.WatchdogTimeout, ttl)
	}
	return nil
}

// layoutOf is the shared layout of a name of the lock kind not under the gateway's key prefix, or
// ownLayout when no prefix matches it.
func (rn RedissonNames) layoutOf(name string) layout {
	if matchesPrefix(rn.Locks, name) {
		return redissonLock
	}
	if matchesPrefix(rn.RWLocks, name) {
		return redissonRWLock
	}
	return ownLayout
}

// prefixes are every prefix of a name shared with Redisson, of either list.
func (rn RedissonNames) prefixes() []string {
	return append(append([]string(nil), rn.Locks...), rn.RWLocks...)
}
