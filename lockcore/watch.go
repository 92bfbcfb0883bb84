package lockcore

import "context"

// Watch opens a stream of ref's live events (see Stream); its first event is EventState. With a
// token, the stream also reports that lease's loss (EventLost, the last event) when it ends by
// anything but its own release: the lease must hold ref now. Close the stream when done.
//
// It returns ErrInvalidToken for a bad token or a token of another lock (before touching Redis),
// ErrLeaseLost when the token's lease no longer holds ref, ErrShuttingDown once the Service closes
// and ErrUnavailable when Redis does not answer.
func (s *Service) Watch(ctx context.Context, ref Ref, token string) (*Stream, error) {
	if err := s.dep.offers(featureEvents); err != nil {
		return nil, err
	}
	st := &Stream{hub: s.events, ref: ref, key: s.keys(ref).lock, msgs: make(chan *eventMsg, streamBuffer),
		wake: make(chan struct{}, 1), oldEpoch: map[string]bool{}, expired: map[holdKey]bool{}}
	if token != "" {
		l, err := s.tokens.Parse(token, ref)
		if err != nil {
			return nil, err
		}
		st.lease, st.fence = l.ID, l.Fence
	}
	err := st.hub.join(ctx, st)
	var snap snapshot
	if err == nil {
		snap, err = st.snapshot(ctx)
	}
	if err == nil && st.lease != "" && !snap.yours {
		err = s.leaseLost(ctx, Lease{Lock: ref.Name, Kind: ref.Kind, ID: st.lease}, "")
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	st.adopt(snap)
	return st, nil
}
