package lockcore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The contracts of election.lua and election_resign.lua (see luascripts/lib_election.lua for an
// election's leader hash and log), and the log's entries as lockcore reads them back.

// electionArgs is election.lua's call: op "elect", "proclaim" or "check".
type electionArgs struct {
	op    string
	lease string
	fence int64
	owner string
	value string
	idem  idemKey // a proclaim's
}

func (e *engine) electionCall(ref Ref, a electionArgs) call {
	k := e.keys(ref)
	fence := ""
	if a.fence > 0 {
		fence = strconv.FormatInt(a.fence, 10)
	}
	sc := scripts.election
	if a.op == "check" {
		sc = scripts.electionCheck
	}
	return a.idem.on(call{script: sc, keys: []string{k.lock, k.qd, k.leader(), k.log(), k.idempotency("proclaim", a.lease, a.idem.key)},
		args: []string{a.op, a.lease, fence, a.owner, a.value, strconv.Itoa(e.space.electionLog), e.space.electionRetentionMs, a.idem.ms(), strconv.Itoa(e.space.electionLogBytes)}})
}

// electionReply is election.lua's reply: whether the lease held (elect, proclaim), the election
// after the call, and the entries it appended.
type electionReply struct {
	ok       bool
	state    ElectionState
	lease    string // the announced leader's lease ("" when none)
	appended []string
}

// decodeElection reads election.lua's reply on election name.
func decodeElection(name string, reply []rueidis.RedisMessage) (electionReply, error) {
	r := replyValues(reply)
	if len(r) != 13 {
		return electionReply{}, unexpectedReply("election", name, r, nil)
	}
	ok, ok1 := r[0].(int64)
	last, ok2 := r[1].(string)
	lastN, ok3 := r[2].(int64)
	lease, ok4 := r[3].(string)
	fence, ok5 := r[4].(int64)
	owner, ok6 := r[5].(string)
	value, ok7 := r[6].(string)
	since, ok8 := r[7].(int64)
	vid, ok9 := r[9].(string)
	pttl, ok10 := r[10].(int64)
	candidates, ok11 := r[11].(int64)
	appended, ok12 := r[12].(string)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8 && ok9 && ok10 && ok11 && ok12) {
		return electionReply{}, unexpectedReply("election", name, r, nil)
	}
	out := electionReply{ok: ok == 1, lease: lease, appended: strings.Fields(appended),
		state: ElectionState{Election: name, Candidates: candidates, LastEventID: last, lastN: lastN}}
	if lease != "" {
		out.state.Leader = &Leader{Owner: owner, Value: value, Fence: fence, Since: time.UnixMilli(since),
			TTL: time.Duration(max(pttl, 0)) * time.Millisecond, EventID: vid}
	}
	return out, nil
}

// resignArgs is election_resign.lua's call: release.lua's, then the log's keys and bounds.
type resignArgs struct {
	lease string
	idem  idemKey
}

func (e *engine) resignCall(l Lease, a resignArgs) call {
	lc := e.lockCall(l.Ref())
	k := lc.keys
	c := lc.call(scripts.electionResign, []string{k.idempotency("release", a.lease, a.idem.key), k.leader(), k.log()},
		a.lease, a.idem.ms(), "", "", strconv.Itoa(e.space.electionLog), e.space.electionRetentionMs, strconv.Itoa(e.space.electionLogBytes))
	c.about = about{lease: a.lease, idempotent: a.idem.key != ""}
	return a.idem.on(c)
}

// resignReply is election_resign.lua's reply: release.lua's, the id of the `resigned` entry ("":
// none) and the entries appended.
type resignReply struct {
	releaseReply
	resigned string
	appended []string
}

func decodeResign(name string, reply []rueidis.RedisMessage) (resignReply, error) {
	if len(reply) < 3 {
		return resignReply{}, unexpectedReply("election_resign", name, reply, nil)
	}
	n := len(reply)
	resigned, err1 := reply[n-2].ToString()
	appended, err2 := reply[n-1].ToString()
	if err := errors.Join(err1, err2); err != nil {
		return resignReply{}, unexpectedReply("election_resign", name, reply, err)
	}
	rel, err := decodeRelease(name, reply[:n-2])
	if err != nil {
		return resignReply{}, err
	}
	return resignReply{releaseReply: rel, resigned: resigned, appended: strings.Fields(appended)}, nil
}

// entryID is a log entry's id, "<ms>-<seq>" as Redis makes them; "0-0" stands before the first.
type entryID struct{ ms, seq uint64 }

// parseEntryID reads an entry id as a client sends it back (Last-Event-ID).
func parseEntryID(s string) (entryID, bool) {
	a, b, ok := strings.Cut(s, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(s) > 41 {
		return entryID{}, false
	}
	return entryID{ms, seq}, true
}

func (id entryID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq, 10)
}

// logEntry is one entry of an election's log, as lib_election.lua's el_append writes it.
type logEntry struct {
	id    string
	typ   ElectionEventType
	n     int64
	fence int64
	owner string
	value string
	at    time.Time
}

// readEntries reads the entries of an XRANGE or XREAD reply.
func readEntries(name string, entries []rueidis.XRangeEntry) ([]logEntry, error) {
	out := make([]logEntry, 0, len(entries))
	for _, x := range entries {
		f := x.FieldValues
		n, err1 := strconv.ParseInt(f["n"], 10, 64)
		fence, err2 := strconv.ParseInt(f["fence"], 10, 64)
		at, err3 := strconv.ParseInt(f["at"], 10, 64)
		typ := ElectionEventType(f["e"])
		switch {
		case errors.Join(err1, err2, err3) != nil:
			return nil, fmt.Errorf("election %q: log entry %s is unreadable: %v", name, x.ID, f)
		case typ != ElectionElected && typ != ElectionProclaimed && typ != ElectionResigned && typ != ElectionVacant:
			return nil, fmt.Errorf("election %q: log entry %s has an unknown type %q", name, x.ID, typ)
		}
		out = append(out, logEntry{id: x.ID, typ: typ, n: n, fence: fence, owner: f["owner"], value: f["value"], at: time.UnixMilli(at)})
	}
	return out, nil
}

// event is the entry as a stream reports it.
func (x logEntry) event() ElectionEvent {
	return ElectionEvent{Type: x.typ, ID: x.id, At: x.at, Owner: x.owner, Value: x.value, Fence: x.fence}
}

// Leader is an election's announced leader as read.
type Leader struct {
	Owner string
	Value string
	Fence int64
	Since time.Time     // when it was announced (Redis time)
	TTL   time.Duration // what its lease had left when read
	// EventID is the id of the log entry that announced its value (`elected` or `proclaimed`).
	EventID string
}

// ElectionState is an election as read: its announced leader, its candidates and its log's end.
type ElectionState struct {
	Election string
	Leader   *Leader // nil: nobody leads
	// Candidates are the live waiters in the election's line (the leader not counted).
	Candidates int64
	// LastEventID is the id of the log's last entry ("0-0" when the log is empty): a stream that
	// starts from this state goes on after it.
	LastEventID string
	lastN       int64 // that entry's number
}

// ElectionEventType names what an ElectionStream reports: a state, or one of the log's entries.
type ElectionEventType string

const (
	ElectionStateEvent ElectionEventType = "state"      // the election as it is: first, and after a gap
	ElectionElected    ElectionEventType = "elected"    // a leader, announced with its value
	ElectionProclaimed ElectionEventType = "proclaimed" // the leader's new value
	ElectionResigned   ElectionEventType = "resigned"   // the leader gave up the lead
	ElectionVacant     ElectionEventType = "vacant"     // the leader's lease was found gone (ran out, force-released)
)

// ElectionEvent is one event of an ElectionStream.
type ElectionEvent struct {
	Type ElectionEventType
	// ID is the log entry's id; a state's is the id of the last entry it reflects ("0-0": none).
	// A stream resumed after ID (Observe's lastEventID) goes on with the entry that follows it.
	ID string
	At time.Time // Redis time of the entry; the gateway's for a state
	// Owner, Value and Fence are the leader the entry is about (Value: elected, proclaimed).
	Owner string
	Value string
	Fence int64
	// State is a state's.
	State ElectionState
	// Gap is set on a state sent because the entries after the stream's last event are no longer
	// in the log (older than its last Options.ElectionLog entries, or lost by Redis): what happened
	// in between is not known, only where the election is now.
	Gap bool
}
