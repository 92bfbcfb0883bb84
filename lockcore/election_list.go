package lockcore

import (
	"context"
	"slices"
	"strings"
	"sync"
)

// ListElections returns one page of the elections whose names start with prefix that are led or
// have candidates now, each as Leader reads it (its announced leader with the value from its
// leader record, its candidates, its log's end), and the cursor of the next page ("" when the
// listing is complete).
//
// It walks Redis as List does (SCAN ... TYPE hash, never KEYS), finding an election by its lock's
// hash (someone holds it) or its line's (candidates wait), then reads each one found with
// election.lua's check, pipelined: the read GET /elections/{name} makes, which announces the end
// of a leader whose lease ran out (`vacant`) on the way. A page costs List's SCAN calls plus one
// script per election found. An election held by a grant not yet announced and without
// candidates is left out (nobody leads it yet); a vacant one with candidates is listed without a
// leader. List's guarantees and bounds apply. ErrNotSupported on RedLock.
func (s *Service) ListElections(ctx context.Context, prefix, cursor string, limit int) ([]ElectionState, string, error) {
	if err := s.offered(ElectionRef(prefix)); err != nil {
		return nil, "", err
	}
	refs, next, err := s.scanRefs(ctx, KindElection, prefix, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	states := make([]ElectionState, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs { // concurrent calls share rueidis's pipeline
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r electionReply
			r, errs[i] = s.announce(ctx, ref.Ref, electionArgs{op: "check"})
			states[i] = r.state
		}()
	}
	wg.Wait()
	out := states[:0]
	for i, st := range states {
		if errs[i] != nil {
			return nil, "", errs[i]
		}
		if st.Leader != nil || st.Candidates > 0 {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b ElectionState) int { return strings.Compare(a.Election, b.Election) })
	return out, next, nil
}
