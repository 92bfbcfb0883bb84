package lockcore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// ElectionStream is one observer of an election, opened by Observe.
//
// What it guarantees: it reports the election's log, entry after entry, in the order the entries
// were written, with no entry left out: it reads the log itself (XRANGE), so a slow reader, a
// reconnection of the gateway's Redis connections or another replica writing the entries loses
// nothing. Each entry is numbered in Redis; a stream that finds the entry after its last one
// missing (trimmed from the log, or lost with Redis's data) reports a fresh state with Gap set
// instead. A stream resumed with the id of an event another stream sent (on any replica: the ids
// are the log's) goes on exactly after it. A leader's lapse writes nothing by itself: the replica
// that streams the election checks at the leader's expiry, and the check writes `vacant`.
//
// Next must not be called by more than one goroutine at a time; Close may be called from any.
type ElectionStream struct {
	svc  *Service
	ref  Ref
	we   *watchedElection
	wake chan struct{} // cap 1: the log may have grown

	closeOnce sync.Once
	closed    atomic.Bool

	// What follows belongs to the goroutine calling Next.
	last  string // the id of the last entry reported (or of a state's last entry)
	lastN int64  // its number (0: before the first)
	dirty bool   // the log may hold entries after last
	out   []ElectionEvent
	retry *time.Timer // a read that failed on Redis is retried when it fires
}

// Close ends the stream; Next returns ErrStreamEnded after it.
func (st *ElectionStream) Close() {
	st.closeOnce.Do(func() {
		st.closed.Store(true)
		st.svc.elections.leave(st)
	})
}

// Done returns a channel closed once the Service closes: from then on Next returns
// ErrShuttingDown.
func (st *ElectionStream) Done() <-chan struct{} { return st.svc.ctx.Done() }

// Next returns the stream's next event, waiting for one until ctx ends (ctx's error; the stream
// stays usable). It returns ErrShuttingDown once the Service closes and ErrStreamEnded after
// Close. Redis errors are ridden out: the stream reads again a moment later.
func (st *ElectionStream) Next(ctx context.Context) (ElectionEvent, error) {
	for {
		switch {
		case st.closed.Load():
			return ElectionEvent{}, ErrStreamEnded
		case len(st.out) > 0:
			ev := st.out[0]
			st.out = st.out[1:]
			return ev, nil
		case st.svc.ctx.Err() != nil:
			return ElectionEvent{}, ErrShuttingDown
		}
		if st.dirty && st.retry == nil {
			if err := st.read(ctx); err != nil {
				if !errors.Is(err, ErrUnavailable) {
					return ElectionEvent{}, err
				}
				st.retry = time.NewTimer(retryCheck)
			}
			continue
		}
		var retry <-chan time.Time
		if st.retry != nil {
			retry = st.retry.C
		}
		select {
		case <-st.wake:
			st.dirty = true
		case <-retry:
			st.retry = nil
		case <-ctx.Done():
			return ElectionEvent{}, ctx.Err()
		case <-st.svc.ctx.Done():
			return ElectionEvent{}, ErrShuttingDown
		}
	}
}

// readBatch is how many entries one read of the log takes.
const readBatch = 100

// read takes the entries after the last one reported into out, or a state when the entry right
// after it is missing.
func (st *ElectionStream) read(ctx context.Context) error {
	c := st.svc.dep.copies()[0]
	log := st.svc.keys(st.ref).log()
	entries, err := c.Do(ctx, c.B().Xrange().Key(log).Start("("+st.last).End("+").Count(readBatch).Build()).AsXRange()
	if err != nil && !rueidis.IsRedisNil(err) {
		return classify(err)
	}
	xs, err := readEntries(st.ref.Name, entries)
	if err != nil {
		return err
	}
	if len(xs) > 0 && xs[0].n != st.lastN+1 {
		return st.restate(ctx, true)
	}
	for _, x := range xs {
		st.out = append(st.out, x.event())
		st.last, st.lastN = x.id, x.n
	}
	st.dirty = len(xs) == readBatch
	return nil
}

// resume starts the stream after entry id, or with a state when the log no longer holds it.
func (st *ElectionStream) resume(ctx context.Context, id string) error {
	c := st.svc.dep.copies()[0]
	log := st.svc.keys(st.ref).log()
	entries, err := c.Do(ctx, c.B().Xrange().Key(log).Start(id).End(id).Build()).AsXRange()
	if err != nil && !rueidis.IsRedisNil(err) {
		return classify(err)
	}
	xs, err := readEntries(st.ref.Name, entries)
	if err != nil {
		return err
	}
	if len(xs) != 1 {
		return st.restate(ctx, true)
	}
	st.last, st.lastN = xs[0].id, xs[0].n
	return nil
}

// restate reports the election as it is now, and goes on after the last entry that state
// reflects.
func (st *ElectionStream) restate(ctx context.Context, gap bool) error {
	state, err := st.svc.Leader(ctx, st.ref.Name)
	if err != nil {
		return err
	}
	st.out = append(st.out, ElectionEvent{Type: ElectionStateEvent, ID: state.LastEventID, At: time.Now(), State: state, Gap: gap})
	st.last, st.lastN, st.dirty = state.LastEventID, state.lastN, true
	return nil
}

// electionHub is this process's election streams, by election, and one follower per election
// they observe. Safe for concurrent use.
type electionHub struct {
	svc *Service

	mu       sync.Mutex
	watching map[string]*watchedElection // by the election's log key
}

// watchedElection is one election this process streams, and its follower's lifetime.
type watchedElection struct {
	ref     Ref
	streams map[*ElectionStream]struct{} // guarded by electionHub.mu
	cancel  context.CancelFunc
}

// followBlock bounds one wait of a follower for the log to grow: it then checks the election
// anyway (a leader that lapses is found at its expiry; this covers what it cannot see coming, such
// as a force release).
const followBlock = 5 * time.Second

func newElectionHub(s *Service) *electionHub {
	return &electionHub{svc: s, watching: map[string]*watchedElection{}}
}

// join registers st with its election, starting the election's follower if st is its first
// stream here. It fails with ErrShuttingDown once the Service closes.
func (h *electionHub) join(st *ElectionStream) error {
	key := h.svc.keys(st.ref).log()
	h.mu.Lock()
	defer h.mu.Unlock()
	we := h.watching[key]
	if we == nil {
		ctx, cancel := context.WithCancel(h.svc.ctx)
		we = &watchedElection{ref: st.ref, streams: map[*ElectionStream]struct{}{}, cancel: cancel}
		// Under the waiters' lock, as every goroutine the Service starts: Close cancels under it.
		ws := h.svc.waiters
		ws.mu.Lock()
		closing := h.svc.ctx.Err() != nil
		if !closing {
			h.svc.wg.Go(func() { h.follow(ctx, we, key) })
		}
		ws.mu.Unlock()
		if closing {
			cancel()
			return ErrShuttingDown
		}
		h.watching[key] = we
	}
	we.streams[st] = struct{}{}
	st.we = we
	return nil
}

// leave unregisters st; the election's follower stops with its last stream.
func (h *electionHub) leave(st *ElectionStream) {
	if st.we == nil {
		return
	}
	key := h.svc.keys(st.ref).log()
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(st.we.streams, st)
	if len(st.we.streams) == 0 && h.watching[key] == st.we {
		delete(h.watching, key)
		st.we.cancel()
	}
}

// wakeAll tells every stream of we that the log may have grown. It never blocks.
func (h *electionHub) wakeAll(we *watchedElection) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range we.streams {
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

// follow wakes we's streams whenever the election's log grows, until ctx ends: it waits for the
// log with a blocking XREAD (one connection of the client's pool of blocking connections per
// election this process streams, not per stream), and checks the election (election.lua's check)
// when its leader's lease should run out, at most followBlock apart, so that a leader's lapse,
// which writes nothing by itself, is announced `vacant` within milliseconds of its expiry.
func (h *electionHub) follow(ctx context.Context, we *watchedElection, logKey string) {
	s := h.svc
	c := s.dep.copies()[0]
	known := ""
	for ctx.Err() == nil {
		state, err := s.Leader(ctx, we.ref.Name)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("checking an observed election failed; retrying", "election", we.ref.Name, "err", err)
			}
			h.wakeAll(we) // the streams read the log themselves, and retry what fails
			pause(ctx)
			continue
		}
		if state.LastEventID != known {
			known = state.LastEventID
			h.wakeAll(we)
		}
		block := followBlock
		if state.Leader != nil {
			block = min(block, state.Leader.TTL+expiryMargin)
		}
		block = max(block, time.Millisecond) // BLOCK 0 would wait for ever
		res := c.Do(ctx, c.B().Xread().Count(1).Block(block.Milliseconds()).Streams().Key(logKey).Id(known).Build())
		switch err := res.Error(); {
		case err == nil:
			h.wakeAll(we) // the check that follows reads where the log ends now
		case rueidis.IsRedisNil(err): // nothing within block: check the leader
		case ctx.Err() == nil:
			s.log.Warn("following an observed election's log failed; retrying", "election", we.ref.Name, "err", err)
			pause(ctx)
		}
	}
}
