package lockcore

import (
	"fmt"
	"strings"
	"time"
)

// A lock's layout is how its holds are laid out in Redis, chosen per name here and nowhere else:
//
//   - ownLayout: the gateway's own keys alone (keys.go), every semaphore and election, and every
//     lock whose name no Redisson prefix matches;
//   - redissonLock: the gateway's keys, plus Redisson's RLock of the same name in Redisson's own
//     format, so that Redisson clients and the gateway exclude each other;
//   - redissonRWLock: the same with Redisson's RReadWriteLock (exclusive holds are its writers,
//     shared holds its readers).
//
// What a lock does stays in the scripts' lock path; a layout only adds what its keys need
// (luascripts/lib_layout.lua: whether Redisson's holders keep a hold out, and the gateway's holds
// mirrored into Redisson's object after every change). The scripts learn a lock's layout from the
// letter after its kind (see layoutArg), and take Redisson's object as the lock's eighth key.
type layout byte

const (
	ownLayout      layout = '-'
	redissonLock   layout = 'r'
	redissonRWLock layout = 'w'
)

func (l layout) String() string {
	switch l {
	case redissonLock:
		return "Redisson RLock"
	case redissonRWLock:
		return "Redisson RReadWriteLock"
	}
	return "the gateway's own"
}

// shared says whether the layout keeps the lock's holds where Redisson's clients see them.
func (l layout) shared() bool { return l != ownLayout }

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

// admits refuses a TTL that Redisson's clients could cut short. A Redisson reader's watchdog sets
// its read-write lock's TTL to its lockWatchdogTimeout on every renewal, whoever else holds it
// (renewal/ReadLockTask.java): a gateway hold with more time left would outlive Redisson's object,
// and a Redisson writer could enter while it holds. So on RReadWriteLock names a TTL is at most
// that timeout (the gateway's own renewals put the object's expiry back up to its holds').
func (ls lockSpace) admits(r Ref, ttl time.Duration) error {
	if ls.layoutOf(r) == redissonRWLock && ttl > ls.redisson.WatchdogTimeout {
		return fmt.Errorf("%w: %q is shared with Redisson's RReadWriteLock, whose readers' watchdog cuts its TTL to %v: a TTL above it is refused (got %v)",
			ErrInvalid, r.Name, ls.redisson.WatchdogTimeout, ttl)
	}
	return nil
}

// layoutOf is the layout of the lock (or semaphore, or election) r: the one place it is chosen.
// A name that starts with the key prefix is always the gateway's own, "*" or not: as a Redisson
// object it could be one of the gateway's keys.
func (ls lockSpace) layoutOf(r Ref) layout {
	if r.Kind != KindLock || strings.HasPrefix(r.Name, ls.prefix) {
		return ownLayout
	}
	if matchesPrefix(ls.redisson.Locks, r.Name) {
		return redissonLock
	}
	if matchesPrefix(ls.redisson.RWLocks, r.Name) {
		return redissonRWLock
	}
	return ownLayout
}

func matchesPrefix(prefixes []string, name string) bool {
	for _, p := range prefixes {
		if p == "*" || strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// kindArg is the kind argument of a script built on lib.lua on the locks refs (one, or a
// multi-lock's members in KEYS order): the kind, then each lock's layout letter, left out when
// every lock has the gateway's own (see lib.lua).
func (ls lockSpace) kindArg(refs ...Ref) string {
	kind := "l"
	if refs[0].Kind == KindSemaphore {
		kind = "s"
	}
	letters := make([]byte, len(refs))
	shared := false
	for i, r := range refs {
		l := ls.layoutOf(r)
		letters[i] = byte(l)
		shared = shared || l.shared()
	}
	if !shared {
		return kind
	}
	return kind + string(letters)
}

// objectKey is the key of the layout's object of the lock name, whose own keys start with base:
// base itself in the gateway's own layout (its scripts never touch it); Redisson's object, the
// name itself (RedissonObject's getRawName), in Redisson's. The gateway's keys of that lock share
// its Cluster slot: names shared with Redisson hold no '{' (see api.ValidateLockName), so both hash
// on the whole name.
func (l layout) objectKey(base, name string) string {
	if l.shared() {
		return name
	}
	return base
}

// objectWalks are the MATCH patterns of List's walks of the layouts' objects (after the gateway's
// own keys): Redisson's objects (named as the lock) under each prefix shared with Redisson that
// names starting with prefix may have, so that a lock held by Redisson's clients alone is listed
// too. Names hold no glob characters.
func (ls lockSpace) objectWalks(prefix string) []string {
	var walks []string
	for _, shared := range [][]string{ls.redisson.Locks, ls.redisson.RWLocks} {
		for _, p := range shared {
			switch {
			case p == "*" || strings.HasPrefix(prefix, p):
				walks = append(walks, prefix+"*")
			case strings.HasPrefix(p, prefix):
				walks = append(walks, p+"*")
			}
		}
	}
	return walks
}

// objectRef tells which lock a hash key found on a walk of the layouts' objects is: a name shared
// with Redisson (never one under the gateway's key prefix, nor one holding a brace, which no lock
// name does).
func (ls lockSpace) objectRef(key string) (Ref, bool) {
	ref := LockRef(key)
	if strings.ContainsAny(key, "{}") || !ls.layoutOf(ref).shared() {
		return Ref{}, false
	}
	return ref, true
}
