package lockcore

// keys are the Redis keys and channel of one lock; see package luascripts for the layout.
type keys struct {
	lock    string
	fence   string
	channel string
}

func (s *Service) keys(name string) keys {
	base := s.prefix + "{" + name + "}"
	return keys{lock: base, fence: base + ":fence", channel: base + ":released"}
}
