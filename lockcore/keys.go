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
	lock, fence, q, qd, qm, sh, shm string
}

func (s *Service) keys(r Ref) keys {
	base := s.prefix + "{" + r.Name + "}"
	if r.Kind == KindSemaphore {
		base += ":sem"
	}
	return keys{lock: base, fence: base + ":fence", q: base + ":q", qd: base + ":qd", qm: base + ":qm",
		sh: base + ":sh", shm: base + ":shm"}
}

// all returns the keys the granting scripts take, in their KEYS order.
func (k keys) all() []string { return []string{k.lock, k.fence, k.q, k.qd, k.qm, k.sh, k.shm} }

// ticket is the key of queue ticket id ("": a key that never exists).
func (k keys) ticket(id string) string { return k.lock + ":ticket:" + id }

// latch is the key under which the first answer to a request with Idempotency-Key key is kept:
// op names the operation, lease the token's lease ("" for a new acquire). Without a key it names a
// key that is never written.
func (k keys) latch(op, lease, key string) string {
	if key == "" {
		return k.lock + ":idem:"
	}
	return k.lock + ":idem:" + op + ":" + lease + ":" + key
}

// with returns all() followed by extra keys.
func (k keys) with(extra ...string) []string { return append(k.all(), extra...) }

// kindArg is the kind argument of the scripts built on lib.lua.
func kindArg(k Kind) string {
	if k == KindSemaphore {
		return "s"
	}
	return "l"
}
