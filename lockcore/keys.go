package lockcore

// Kind tells locks, semaphores and elections apart: they are separate name spaces, with keys and
// tokens of their own. An election is a lock of its own kind whose exclusive holder is its leader
// (see election.go).
type Kind uint8

const (
	KindLock Kind = iota
	KindSemaphore
	KindElection
)

// kinds are every Kind, for the loops that try each.
var kinds = [...]Kind{KindLock, KindSemaphore, KindElection}

func (k Kind) String() string {
	switch k {
	case KindSemaphore:
		return "semaphore"
	case KindElection:
		return "election"
	}
	return "lock"
}

// withArticle is k with its indefinite article, for messages: "a lock", "an election".
func (k Kind) withArticle() string {
	if k == KindElection {
		return "an " + k.String()
	}
	return "a " + k.String()
}

// Ref names one lock, semaphore or election.
type Ref struct {
	Kind Kind
	Name string
}

// LockRef names the lock name; SemaphoreRef the semaphore name; ElectionRef the election name.
func LockRef(name string) Ref      { return Ref{KindLock, name} }
func SemaphoreRef(name string) Ref { return Ref{KindSemaphore, name} }
func ElectionRef(name string) Ref  { return Ref{KindElection, name} }

// keys are the Redis keys of one lock or semaphore; see package luascripts for the layout.
type keys struct {
	lock, q, qd, qm, sh, shm string
	// rs is the layout's object of the name (layout.objectKey), the scripts' eighth key.
	rs string
	// fence is the fence floor the lock's grants draw from, which the deployment lays out (see
	// deployment.fences): not the lock's own key, so it is set by engine.keys.
	fence string
}

// keys returns r's own keys under the space's prefix (all but fence, see engine.keys).
func (ls lockSpace) keys(r Ref) keys {
	base := ls.lockKey(r)
	return keys{lock: base, q: base + ":q", qd: base + ":qd", qm: base + ":qm", sh: base + ":sh", shm: base + ":shm",
		rs: ls.layoutOf(r).objectKey(base, r.Name)}
}

// lockKey is the key of r itself (keys' lock), the one its other keys start with.
func (ls lockSpace) lockKey(r Ref) string {
	switch r.Kind {
	case KindSemaphore:
		return ls.prefix + "{" + r.Name + "}:sem"
	case KindElection:
		return ls.prefix + "{" + r.Name + "}:elect"
	}
	return ls.prefix + "{" + r.Name + "}"
}

// all returns the keys the granting scripts take, in their KEYS order.
func (k keys) all() []string { return k.with() }

// leader and log are an election's announced leader (a hash) and its log (a stream); see
// luascripts/lib_election.lua.
func (k keys) leader() string { return k.lock + ":leader" }
func (k keys) log() string    { return k.lock + ":log" }

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

// with returns all() followed by extra keys, in one allocation.
func (k keys) with(extra ...string) []string {
	return append(append(make([]string, 0, 8+len(extra)), k.lock, k.fence, k.q, k.qd, k.qm, k.sh, k.shm, k.rs), extra...)
}

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
	// An election's log: how many entries and bytes it keeps, and how long (ms) it and the leader
	// hash last after the last announcement or check.
	electionLog, electionLogBytes int
	electionRetentionMs           string
	// shared: the lock names laid out to be shared with other clients (redisson_layout.go).
	shared RedissonNames
}
