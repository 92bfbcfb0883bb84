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

// withTicket returns all() and the key of the queue ticket id ("" names no ticket).
func (k keys) withTicket(id string) []string {
	return []string{k.lock, k.fence, k.q, k.qd, k.qm, k.lock + ":ticket:" + id}
}
