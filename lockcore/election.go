package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Elections: an election is a lock of its own kind (KindElection: keys under P{N}:elect, tokens
// signed in a domain of their own) whose exclusive holder leads it and carries a value (say, its
// address). Campaigning is acquiring that lock, so it inherits everything a lock has: FIFO waiting
// with direct hand-off and queue tickets, fencing, the watchdog, idempotent retries, the held
// quota and every deployment but RedLock. Beside the lock, each election keeps a log of its
// announcements (luascripts/lib_election.lua): `elected`, `proclaimed` (a new value), `resigned`
// and `vacant` (a leader whose lease ran out or was taken away), written by scripts that check
// that the lease named still holds the lock, so that the log's leaders are the lock's holders, in
// the order they held it (their fences increase).
//
// What an observer is promised (ElectionStream): every leader that was told it leads (Campaign
// returned, a 201) was announced `elected` before it was told, and the log lists the leaders in the
// order they held the lock, with strictly increasing fences, each one's end (`resigned` or
// `vacant`) before the next one's `elected`. A grant whose announcement never ran (its gateway
// died between the two) was never told it leads: it is not announced, and it runs out with its
// TTL (its watchdog duty starts after the announcement).

// CampaignRequest asks to lead an election: the lock of kind KindElection named Election, held
// exclusively, with Value announced once it is granted. The fields are AcquireRequest's.
type CampaignRequest struct {
	Election string
	Owner    string
	Value    string
	TTL      time.Duration
	Wait     time.Duration // 0: try once
	Watchdog bool
	MaxHold  time.Duration
	// QueueTicket, IdempotencyKey, Principal and HeldCap are AcquireRequest's.
	QueueTicket, IdempotencyKey, Principal string
	HeldCap                                int
}

func (req CampaignRequest) acquire() AcquireRequest {
	return AcquireRequest{Lock: req.Election, Kind: KindElection, Mode: Exclusive, Owner: req.Owner, TTL: req.TTL, Wait: req.Wait,
		Watchdog: req.Watchdog, MaxHold: req.MaxHold, QueueTicket: req.QueueTicket, IdempotencyKey: req.IdempotencyKey,
		Principal: req.Principal, HeldCap: req.HeldCap}
}

// Leadership is a lease on an election, as its leader should see it.
type Leadership struct {
	Grant // the lease: token, fence, TTL, watchdog, how long the campaign waited
	Value string
	Since time.Time
	// EventID is the id of the log entry that announced Value.
	EventID string
}

// Campaign asks to lead req.Election, waiting up to req.Wait in its FIFO line of candidates, and
// once granted announces its leader with req.Value in the election's log (an `elected` entry)
// before returning. It returns what Acquire returns for a lock (a *HeldError while another leads,
// ErrInvalidTicket, ErrTooManyWaiters, ErrUnavailable, ctx's error...), and ErrLeaseLost when the
// grant ran out before it could be announced. A grant that cannot be announced (Redis failing) is
// given back, unless the request carries an IdempotencyKey: its retry then collects and announces
// it. ErrNotSupported on RedLock.
func (s *Service) Campaign(ctx context.Context, req CampaignRequest) (Leadership, error) {
	areq := req.acquire()
	if err := s.offered(areq.ref()); err != nil {
		return Leadership{}, err
	}
	var err error
	if areq.claim, err = s.claimIdempotencyKey(ctx, areq.ref(), areq.IdempotencyKey, areq.fingerprint("")+"\n"+req.Value, areq.TTL); err != nil {
		return Leadership{}, err
	}
	lease := uuid.NewString()
	member := heldMember(areq.ref(), lease)
	if err := s.ledgers.held.count(ctx, areq.Principal, areq.HeldCap, heldSpan(areq.TTL, areq.Wait, areq.Watchdog, areq.MaxHold), member); err != nil {
		return Leadership{}, err
	}
	var (
		g Grant
		l Leadership
	)
	if areq.Wait > 0 {
		g, err = s.waitAs(ctx, areq, lease)
	} else {
		g, err = s.tryOnce(ctx, areq, lease)
	}
	if err == nil {
		l, err = s.takeOffice(ctx, areq, g, req.Value)
	}
	if err != nil && !grantUnknown(err, areq.IdempotencyKey) || err == nil && l.ID != lease {
		s.ledgers.held.uncount(ctx, areq.Principal, member)
	}
	kind := KindElection.String()
	switch {
	case err != nil:
		s.observeRefusal(kind, err)
	case l.Waited > 0:
		s.obs.Granted(kind, Exclusive, GrantHandOff, l.Waited)
	default:
		s.obs.Granted(kind, Exclusive, GrantNew, 0)
	}
	return l, err
}

// takeOffice announces g, a new grant of an election (or a retry's replay of one), with value,
// then settles it as finishGrant does (a watchdog lease's duty starts only now).
func (s *Service) takeOffice(ctx context.Context, req AcquireRequest, g Grant, value string) (Leadership, error) {
	if ctx.Err() != nil && req.IdempotencyKey == "" { // gone before it could be told: nothing to announce
		s.resignBack(ctx, g)
		return Leadership{}, ctx.Err()
	}
	r, err := s.announce(ctx, g.Ref(), electionArgs{op: "elect", lease: g.ID, fence: g.Fence, owner: g.Owner, value: value})
	switch {
	case err != nil:
		if req.IdempotencyKey == "" { // its retry would announce it; without one, nobody would
			s.resignBack(ctx, g)
		}
		return Leadership{}, err
	case !r.ok: // its lease ran out between the grant and the announcement
		return Leadership{}, s.leaseLost(ctx, g.Lease, "")
	}
	if g, err = s.finishGrant(ctx, req, g, (*Service).resignBack); err != nil {
		return Leadership{}, err
	}
	leader := r.state.Leader
	return Leadership{Grant: g, Value: leader.Value, Since: leader.Since, EventID: leader.EventID}, nil
}

// ProclaimRequest sets the value of the leader whose lease Token names.
type ProclaimRequest struct {
	Election string
	Token    string
	Value    string
	// IdempotencyKey, when set, makes a retry (same key, token and value) change nothing more, even
	// after a later proclaim. Without one a proclaim is idempotent by its value: proclaiming the
	// value the leader has announces nothing.
	IdempotencyKey string
}

// Proclaim announces a new value of the election's leader (a `proclaimed` entry) without giving up
// the lead, and returns the leader as announced. It returns ErrInvalidToken for a bad token,
// ErrLeaseLost when the lease no longer holds the election (a `vacant` entry is then written for
// it), and ErrUnavailable.
func (s *Service) Proclaim(ctx context.Context, req ProclaimRequest) (Leader, error) {
	ref := ElectionRef(req.Election)
	if err := s.offered(ref); err != nil {
		return Leader{}, err
	}
	l, err := s.tokens.Parse(req.Token, ref)
	if err != nil {
		return Leader{}, err
	}
	fingerprint := strings.Join([]string{"proclaim", ref.Name, l.ID, req.Value}, "\n")
	claim, err := s.claimIdempotencyKey(ctx, ref, req.IdempotencyKey, fingerprint, 0)
	if err != nil {
		return Leader{}, err
	}
	r, err := s.announce(ctx, ref, electionArgs{op: "proclaim", lease: l.ID, fence: l.Fence, owner: l.Owner, value: req.Value,
		idem: s.idem(req.IdempotencyKey).claiming(claim)})
	if err == nil && (!r.ok || r.lease != l.ID) {
		err = s.leaseLost(ctx, l, "")
	}
	if err != nil {
		s.observeRefusal(ref.Kind.String(), err)
		return Leader{}, err
	}
	return *r.state.Leader, nil
}

// ResignRequest gives up the lead of the election whose lease Token names.
type ResignRequest struct {
	Election string
	Token    string
	// IdempotencyKey, when set, makes a retry answer as the first resignation did.
	IdempotencyKey string
}

// Resigned reports a resignation.
type Resigned struct {
	Fence int64
	// EventID is the id of the `resigned` entry; "" when none was written (a retry, or a lease
	// that was never announced).
	EventID string
}

// Resign ends the lead of the lease req.Token names: one script writes the `resigned` entry and
// hands the election to the first live candidate in line, as a release hands a lock over. It
// returns ErrInvalidToken, ErrLeaseLost when the lease no longer holds (its `vacant` entry is
// written on the way), and ErrUnavailable.
func (s *Service) Resign(ctx context.Context, req ResignRequest) (Resigned, error) {
	ref := ElectionRef(req.Election)
	if err := s.offered(ref); err != nil {
		return Resigned{}, err
	}
	l, err := s.tokens.Parse(req.Token, ref)
	if err != nil {
		return Resigned{}, err
	}
	claim, err := s.claimIdempotencyKey(ctx, ref, req.IdempotencyKey, releaseFingerprint(l, ""), 0)
	if err != nil {
		return Resigned{}, err
	}
	r, err := s.resignLease(ctx, l, s.idem(req.IdempotencyKey).claiming(claim))
	if err == nil || errors.Is(err, ErrLeaseLost) {
		s.ledgers.held.uncount(ctx, l.Principal, heldMember(ref, l.ID))
	}
	if err != nil {
		s.observeRefusal(ref.Kind.String(), err)
		return Resigned{}, err
	}
	s.obs.HoldReleased(ref.Kind.String(), Exclusive, heldSince(l.Fence, time.Now()))
	return Resigned{Fence: l.Fence, EventID: r.resigned}, nil
}

// resignBack gives back g, a leader's grant it cannot keep, as Resign does (its `resigned` entry,
// if it was announced, with the release), on a context of its own: the caller's may have ended.
func (s *Service) resignBack(ctx context.Context, g Grant) {
	_, _ = s.resignLease(context.WithoutCancel(ctx), g.Lease, idemKey{})
}

// resignLease runs election_resign.lua for l: its `resigned` entry if it was the announced
// leader, and its release.
func (s *Service) resignLease(ctx context.Context, l Lease, idem idemKey) (resignReply, error) {
	reply, err := s.dep.run(ctx, s.resignCall(l, resignArgs{lease: l.ID, idem: idem}))
	if err != nil {
		return resignReply{}, err
	}
	r, err := decodeResign(l.Lock, reply)
	if err != nil {
		return resignReply{}, err
	}
	s.announced(r.appended)
	switch {
	case r.lost:
		return resignReply{}, s.leaseLost(ctx, l, "")
	case r.watchdog:
		s.watchdog.unschedule(ctx, l)
	}
	return r, nil
}

// Leader reads election name: its announced leader (after announcing the end of one whose lease
// no longer holds, `vacant`), its candidates and the id of its log's last entry. ErrUnavailable
// when Redis does not answer.
func (s *Service) Leader(ctx context.Context, name string) (ElectionState, error) {
	ref := ElectionRef(name)
	if err := s.offered(ref); err != nil {
		return ElectionState{}, err
	}
	r, err := s.announce(ctx, ref, electionArgs{op: "check"})
	return r.state, err
}

// announce runs election.lua on ref and tells the observer what it appended.
func (e *engine) announce(ctx context.Context, ref Ref, a electionArgs) (electionReply, error) {
	reply, err := e.dep.run(ctx, e.electionCall(ref, a))
	if err != nil {
		return electionReply{}, err
	}
	r, err := decodeElection(ref.Name, reply)
	if err != nil {
		return electionReply{}, err
	}
	e.announced(r.appended)
	return r, nil
}

// announced tells the observer about the log entries a script appended.
func (e *engine) announced(entries []string) {
	for _, typ := range entries {
		e.obs.ElectionLogged(typ)
	}
}

// keepElection keeps an election's leader hash and log alive while its leader's lease is renewed
// (they expire Options.ElectionRetention after the last announcement or check), and announces a
// lapse it finds. A failure is logged: the next renewal tries again.
func (e *engine) keepElection(ctx context.Context, ref Ref) {
	if _, err := e.announce(context.WithoutCancel(ctx), ref, electionArgs{op: "check"}); err != nil {
		e.log.Warn("keeping an election's log failed", "election", ref.Name, "err", err)
	}
}

// errCampaignOnly refuses the lock operations an election is not run with: acquiring it bypasses
// the announcement, releasing it the resignation.
func errCampaignOnly(ref Ref, use string) error {
	return fmt.Errorf("%w: election %q: %s", ErrInvalid, ref.Name, use)
}

// Observe opens a stream of election name's announcements (see ElectionStream). Without
// lastEventID its first event is a state; with the id of an event a stream sent it goes on after
// that event ("0-0": after a state of an empty log), or with a state (Gap set) when the log no
// longer holds it. It returns ErrInvalid for a lastEventID that is no entry id, ErrShuttingDown
// once the Service closes and ErrUnavailable when Redis does not answer. Close the stream when
// done.
func (s *Service) Observe(ctx context.Context, name, lastEventID string) (*ElectionStream, error) {
	ref := ElectionRef(name)
	if err := s.offered(ref); err != nil {
		return nil, err
	}
	var from entryID
	if lastEventID != "" {
		id, ok := parseEntryID(lastEventID)
		if !ok {
			return nil, fmt.Errorf("%w: election %q: the event id to resume after, %s, is not one an election stream sends (<ms>-<seq>)",
				ErrInvalid, name, quoteShort(lastEventID))
		}
		from = id
	}
	st := &ElectionStream{svc: s, ref: ref, wake: make(chan struct{}, 1), dirty: true}
	// Joined before the first read: an entry appended after that read wakes the stream.
	if err := s.elections.join(st); err != nil {
		return nil, err
	}
	var err error
	switch {
	case lastEventID == "":
		err = st.restate(ctx, false)
	case from == entryID{}:
		st.last = from.String()
	default:
		err = st.resume(ctx, from.String())
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// quoteShort quotes s for an error message, cut to its first 64 bytes (a client's header may be
// as long as the server lets it: it is not echoed back whole).
func quoteShort(s string) string {
	const most = 64
	if len(s) <= most {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:most]) + fmt.Sprintf("… (%d bytes)", len(s))
}
