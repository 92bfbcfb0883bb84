package lockcore

// Kind tells locks and semaphores apart: they are separate name spaces, with keys and tokens of
// their own.
type Kind uint8

const (
	KindLock Kind = iota
	KindSemaphore
)

func (k Kind) String() string {
	if k == KindSemaphore {
		return "semaphore"
	}
	return "lock"
}

// Ref names one lock or one semaphore.
type Ref struct {
	Kind Kind
	Name string
}

// LockRef names the lock name; SemaphoreRef the semaphore name.
func LockRef(name string) Ref      { return Ref{KindLock, name} }
func SemaphoreRef(name string) Ref { return Ref{KindSemaphore, name} }

// keys are the Redis keys of one lock or semaphore; see package luascripts for the layout.
type keys struct {
	lock, q, qd, qm, sh, shm string
	// fence is the fence floor the lock's grants draw from, which the deployment lays out (see
	// deployment.fences): not the lock's own key, so it is set by engine.keys.
	fence string
}

// keys returns r's own keys under the space's prefix (all but fence, see engine.keys).
func (ls lockSpace) keys(r Ref) keys {
	base := ls.prefix + "{" + r.Name + "}"
	if r.Kind == KindSemaphore {
		base += ":sem"
	}
	return keys{lock: base, q: base + ":q", qd: base + ":qd", qm: base + ":qm", sh: base + ":sh", shm: base + ":shm"}
}

// all returns the keys the granting scripts take, in their KEYS order.
func (k keys) all() []string { return []string{k.lock, k.fence, k.q, k.qd, k.qm, k.sh, k.shm} }

// forced is the key of the mark a force release leaves for lease (see force.lua).
func (k keys) forced(lease string) string { return k.lock + ":forced:" + lease }

// ticket is the key of queue ticket id ("": a key that never exists).
func (k keys) ticket(id string) string { return k.lock + ":ticket:" + id }

// idempotency is the key of the idempotency record: the key under which the first answer to a request with Idempotency-Key key is kept:
// op names the operation, lease the token's lease ("" for a new acquire). Without a key it names a
// key that is never written.
func (k keys) idempotency(op, lease, key string) string {
	if key == "" {
		return k.lock + ":idem:"
	}
	return k.lock + ":idem:" + op + ":" + lease + ":" + key
}

// with returns all() followed by extra keys.
func (k keys) with(extra ...string) []string { return append(k.all(), extra...) }

// Mode is how a lock is held: exclusively (one holder) or shared (any number of shared holders,
// no exclusive one).
type Mode string

const (
	Exclusive Mode = "exclusive"
	Shared    Mode = "shared"
)

// arg is the mode's script argument.
func (m Mode) arg() string {
	if m == Shared {
		return "s"
	}
	return "x"
}

// lockSpace lays out the locks' keys under the prefix and starts the calls of the scripts on one
// lock with lib.lua's common ARGV, formatted once.
type lockSpace struct {
	prefix                          string
	claimMs, livenessMs, fenceTTLMs string
}
