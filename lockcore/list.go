package lockcore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// List returns one page of the locks (kind KindLock) or semaphores (KindSemaphore) held now whose
// names start with prefix, and the cursor of the next page ("" when the listing is complete).
//
// It walks Redis with SCAN (never KEYS), asking for hash keys under the name prefix (TYPE hash,
// MATCH "<key prefix>{<name prefix>*"), and inspects each holder it finds (one read-only script
// each, pipelined), then reads who waits for those with waiters (State.Waiting; one more script
// each). A page costs one or more SCAN calls of COUNT limit (until about limit holders are found
// or the keyspace is walked) plus one inspect per holder and one read per line with waiters;
// SCAN's guarantees apply: a name held during the whole listing appears at least once (rarely
// twice), and one taken or freed meanwhile may or may not. A page may hold a few more than limit entries (SCAN returns
// whole hash buckets) or fewer. On Redis Cluster the walk goes master by master; the cursor
// carries the master's position, so a resharding during a listing may skip or repeat names.
//
// Locks whose names are shared with Redisson (layout.go) and that only Redisson's clients hold
// leave none of the gateway's keys: after the gateway's keys, the walk goes on over Redisson's
// objects (hash keys named as the lock) under each shared prefix, and lists those held by
// Redisson's clients alone (the others were listed already).
func (s *Service) List(ctx context.Context, kind Kind, prefix, cursor string, limit int) ([]State, string, error) {
	refs, next, err := s.scanRefs(ctx, kind, prefix, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	states := make([]State, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, found := range refs { // concurrent calls share rueidis's pipeline
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = s.Inspect(ctx, found.Ref, "")
			if errs[i] == nil && states[i].Held() && states[i].Waiters > 0 {
				states[i].Waiting, errs[i] = s.waiting(ctx, found.Ref, ListedWaiters)
			}
		}()
	}
	wg.Wait()
	out := states[:0]
	for i, st := range states {
		if errs[i] != nil {
			return nil, "", errs[i]
		}
		if refs[i].object && (st.Exclusive != nil || st.SharedCount > 0) {
			continue // held by the gateway too: listed by the walk of its keys
		}
		if st.Held() {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b State) int { return strings.Compare(a.Ref.Name, b.Ref.Name) })
	return out, next, nil
}

// foundRef is a name List's walk found, and whether it was found as a layout's object (see
// objectWalks) rather than by the gateway's keys.
type foundRef struct {
	Ref
	object bool
}

// scanRefs walks one page of List's SCAN: the refs of kind whose keys heldKeyRef (or, on the
// walks of the layouts' objects, objectRef) recognises, each once, and the cursor of the next
// page ("" when the walk is complete).
func (s *Service) scanRefs(ctx context.Context, kind Kind, prefix, cursor string, limit int) ([]foundRef, string, error) {
	if err := s.dep.offers(featureListing); err != nil {
		return nil, "", err
	}
	masters, err := s.dep.masters(ctx)
	if err != nil {
		return nil, "", err
	}
	walks := s.listWalks(kind, prefix)
	walk, node, scan, err := parseListCursor(cursor, len(walks), len(masters))
	if err != nil {
		return nil, "", err
	}
	var refs []foundRef
	seen := map[Ref]bool{}
	for rounds := 0; walk < len(walks) && len(refs) < limit && rounds < 16; rounds++ {
		c := masters[node]
		entry, err := c.Do(ctx, c.B().Scan().Cursor(scan).Match(walks[walk]).Count(int64(limit)).Type("hash").Build()).AsScanEntry()
		if err != nil {
			return nil, "", classify(err)
		}
		for _, key := range entry.Elements {
			ref, ok := s.heldKeyRef(key, kind)
			if walk > 0 {
				ref, ok = s.space.objectRef(key)
			}
			if ok && !seen[ref] {
				seen[ref] = true
				refs = append(refs, foundRef{ref, walk > 0})
			}
		}
		scan = entry.Cursor
		if scan == 0 {
			if node++; node == len(masters) {
				walk, node = walk+1, 0
			}
		}
	}
	next := ""
	if walk < len(walks) {
		next = strconv.Itoa(node) + "-" + strconv.FormatUint(scan, 10)
		if walk > 0 {
			next = strconv.Itoa(walk) + "-" + next
		}
	}
	return refs, next, nil
}

// listWalks are the MATCH patterns of List's walks, one after the other: the gateway's own keys of
// names starting with prefix, then, for locks, the layouts' objects of such names (objectWalks).
func (s *Service) listWalks(kind Kind, prefix string) []string {
	walks := []string{s.space.prefix + "{" + prefix + "*"}
	if kind != KindLock {
		return walks
	}
	return append(walks, s.space.objectWalks(prefix)...)
}

// waiting reads the first limit live waiters of ref's line (waiting.lua; see Waiter). It is read
// after the holders, in a script of its own, so that Inspect, which lock clients call too, costs
// what it did: a listing's line may be a moment newer than its holders.
func (s *Service) waiting(ctx context.Context, ref Ref, limit int) ([]Waiter, error) {
	k := s.keys(ref)
	reply, err := s.dep.run(ctx, call{script: scripts.waiting, keys: []string{k.q, k.qd, k.qm}, args: []string{strconv.Itoa(limit)}})
	if err != nil {
		return nil, err
	}
	r := replyValues(reply)
	out, ok := readWaiting(r)
	if !ok {
		return nil, unexpectedReply("waiting", ref.Name, r, nil)
	}
	return out, nil
}

// readWaiting reads waiting.lua's reply: {now_us, [lease, owner, mode, arrival_us]...}.
func readWaiting(r []any) ([]Waiter, bool) {
	if len(r) < 1 || (len(r)-1)%4 != 0 {
		return nil, false
	}
	now, ok := r[0].(int64)
	if !ok {
		return nil, false
	}
	out := make([]Waiter, 0, (len(r)-1)/4)
	for r = r[1:]; len(r) >= 4; r = r[4:] {
		lease, ok1 := r[0].(string)
		owner, ok2 := r[1].(string)
		mode, ok3 := r[2].(string)
		arrival, ok4 := r[3].(int64)
		if !(ok1 && ok2 && ok3 && ok4) {
			return nil, false
		}
		w := Waiter{Lease: lease, Owner: owner, Mode: Exclusive, Since: time.UnixMicro(arrival),
			Waited: time.Duration(max(now-arrival, 0)) * time.Microsecond}
		if mode == Shared.arg() {
			w.Mode = Shared
		}
		out = append(out, w)
	}
	return out, true
}

// heldKeyRef tells which lock, semaphore or election of kind a hash key found by List belongs to,
// if it is one that says someone holds it: a lock's hash (its exclusive holder), a lock's or a
// semaphore's shared holders' hash, an election's lock hash (its leader). An election is also
// found by its line's hash (qm: candidates wait), so that ListElections shows a vacant election
// that has candidates. Other hashes are skipped. Names never contain '{' or '}'.
func (s *Service) heldKeyRef(key string, kind Kind) (Ref, bool) {
	rest, ok := strings.CutPrefix(key, s.space.prefix+"{")
	if !ok {
		return Ref{}, false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return Ref{}, false
	}
	name, suffix := rest[:i], rest[i+1:]
	switch {
	case kind == KindLock && (suffix == "" || suffix == ":shm"):
		return LockRef(name), true
	case kind == KindSemaphore && suffix == ":sem:shm":
		return SemaphoreRef(name), true
	case kind == KindElection && (suffix == ":elect" || suffix == ":elect:qm"):
		return ElectionRef(name), true
	}
	return Ref{}, false
}

// parseListCursor reads List's cursor: "" (the start), "<master>-<scan cursor>" (on the walk of
// the gateway's keys) or "<walk>-<master>-<scan cursor>" (see listWalks).
func parseListCursor(cursor string, walks, masters int) (walk, node int, scan uint64, err error) {
	if cursor == "" {
		return 0, 0, 0, nil
	}
	parts := strings.Split(cursor, "-")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	bad := fmt.Errorf("%w: cursor %q is not one a listing returned", ErrInvalid, cursor)
	if len(parts) != 3 {
		return 0, 0, 0, bad
	}
	walk, err1 := strconv.Atoi(parts[0])
	node, err2 := strconv.Atoi(parts[1])
	scan, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || walk < 0 || walk >= walks || node < 0 || node >= masters {
		return 0, 0, 0, bad
	}
	return walk, node, scan, nil
}
