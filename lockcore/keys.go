package lockcore

// keys are the Redis keys of one lock; see package luascripts for the layout.
type keys struct {
	lock, fence, q, qd, qm string
}

func (s *Service) keys(name string) keys {
	base := s.prefix + "{" + name + "}"
	return keys{lock: base, fence: base + ":fence", q: base + ":q", qd: base + ":qd", qm: base + ":qm"}
}

// all returns the keys the granting scripts take, in their KEYS order.
func (k keys) all() []string { return []string{k.lock, k.fence, k.q, k.qd, k.qm} }

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
