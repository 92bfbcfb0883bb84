package lockcore

import (
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

// ownLayout is the gateway's own; the layouts shared with Redisson are in redisson_layout.go.
const ownLayout layout = '-'

func (l layout) String() string {
	if name, ok := sharedLayoutNames[l]; ok {
		return name
	}
	return "the gateway's own"
}

// shared says whether the layout keeps the lock's holds where Redisson's clients see them.
func (l layout) shared() bool { return l != ownLayout }

// admits refuses a TTL that a layout's other clients could cut short (see sharedNames.admits).
func (ls lockSpace) admits(r Ref, ttl time.Duration) error {
	return ls.shared.admits(r, ls.layoutOf(r), ttl)
}

// layoutOf is the layout of the lock (or semaphore, or election) r: the one place it is chosen.
// A name that starts with the key prefix is always the gateway's own, "*" or not: as a Redisson
// object it could be one of the gateway's keys.
func (ls lockSpace) layoutOf(r Ref) layout {
	if r.Kind != KindLock || strings.HasPrefix(r.Name, ls.prefix) {
		return ownLayout
	}
	return ls.shared.layoutOf(r.Name)
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
	for _, p := range ls.shared.prefixes() {
		switch {
		case p == "*" || strings.HasPrefix(prefix, p):
			walks = append(walks, prefix+"*")
		case strings.HasPrefix(p, prefix):
			walks = append(walks, p+"*")
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
