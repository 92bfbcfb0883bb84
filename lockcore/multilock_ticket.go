package lockcore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// A group queue ticket lets a waiting multi-lock keep its place across long-polls, as a queue
// ticket does for a single waiter. A group's wait that runs out while it waits in a member's line
// gives back the members it took (nothing is held between long-polls) and leaves that line with
// the member's own queue ticket; the answer carries a group ticket wrapping it. The next waiting
// request for the same members that presents it resumes as the same group (the same multi-lock
// id, and the same start of its wait for the figures that say how long it waited), takes the
// members again in name order, and queues in that member's line at the arrival its ticket kept.
//
// A resumed group's id is a lease: two requests must never run as it at once (both would be
// granted what it holds). A record in Redis, kept TicketGrace and taken once, makes the ticket
// work once: a copy, or a ticket presented again, waits as a newcomer under a new id, as does one
// presented after the grace. And a ticket is handed out only when the wait left the member's line
// cleanly (no Redis call of it still on its way, which could later give back what the resumed
// group was granted): without a member's ticket there is no group ticket.
//
// Group tickets are signed in the queue tickets' domain with a kind of their own ("multilock"),
// and bound to the owner, the principal and the exact set of members (a hash of their sorted
// names): a lock's ticket is no use to a multi-lock, nor a multi-lock's to a lock.
type groupTicketClaims struct {
	V     int    `json:"v"`
	Kind  string `json:"kind"` // groupTicketKind
	ID    string `json:"id"`   // the record taken once (groupTicketKey)
	Group string `json:"group"`
	Owner string `json:"owner"`
	// Principal is the authenticated caller the ticket was handed to ("": none).
	Principal string `json:"principal,omitempty"`
	Members   string `json:"members"` // memberSetHash of the sorted member names
	Since     int64  `json:"since"`   // when the group's wait started, Unix ms (the gateway's clock)
	// Member is the index, in name order, of the member whose line the group waited in, and
	// Ticket the ID of that member's queue ticket (see ticketClaims).
	Member int    `json:"member"`
	Ticket string `json:"ticket"`
}

// groupTicketKind is a group ticket's kind, which no lock's ticket carries.
const groupTicketKind = "multilock"

// groupResume is what a redeemed group ticket resumes: zero for a newcomer.
type groupResume struct {
	group string    // the multi-lock's id
	since time.Time // when its wait started
	// member is the index of the member whose line it waited in, memberTicket that member's
	// queue ticket, presented when the group reaches it again ("": none).
	member       int
	memberTicket string
}

// memberSetHash names a sorted set of member names: the SHA-256 of the names, one per line (a name
// has no newline), in base64url.
func memberSetHash(names []string) string {
	sum := sha256.Sum256([]byte(strings.Join(names, "\n")))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (t *Tokens) mintGroupTicket(tk groupTicketClaims) string {
	tk.V, tk.Kind = 1, groupTicketKind
	payload, _ := json.Marshal(tk) // cannot fail: strings and ints only
	return t.seal(ticketDomain, payload)
}

// parseGroupTicket returns the claims of the group ticket value presented for the sorted members
// names by owner and principal. A ticket that does not verify yields errTicketIgnored, and one
// handed to no principal presented by an authenticated caller errUnboundTicket: the group waits
// as a newcomer. It returns ErrInvalidTicket for a verified ticket that is a lock's, or was handed
// out for another set of members, owner or principal, or is too long.
func (t *Tokens) parseGroupTicket(value string, names []string, owner, principal string) (groupTicketClaims, error) {
	if len(value) > maxTokenLen {
		return groupTicketClaims{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidTicket, maxTokenLen)
	}
	raw, err := t.verify(ticketDomain, value)
	if err != nil {
		return groupTicketClaims{}, fmt.Errorf("%w: %v", errTicketIgnored, err)
	}
	var tk groupTicketClaims
	if err := json.Unmarshal(raw, &tk); err != nil || tk.V != 1 {
		return groupTicketClaims{}, fmt.Errorf("%w: payload is not a version 1 queue ticket", ErrInvalidTicket)
	}
	if tk.Kind != groupTicketKind {
		return groupTicketClaims{}, fmt.Errorf("%w: handed out to wait for a single %s, not a multi-lock", ErrInvalidTicket, cmp.Or(tk.Kind, "lock"))
	}
	if uuid.Validate(tk.ID) != nil || uuid.Validate(tk.Ticket) != nil || !IsMultiLockID(tk.Group) || tk.Member < 0 || tk.Member >= len(names) {
		return groupTicketClaims{}, fmt.Errorf("%w: payload is not a version 1 multi-lock queue ticket", ErrInvalidTicket)
	}
	if tk.Members != memberSetHash(names) {
		return groupTicketClaims{}, fmt.Errorf("%w: handed out to wait for another set of locks", ErrInvalidTicket)
	}
	if tk.Owner != owner {
		return groupTicketClaims{}, fmt.Errorf("%w: handed out to owner %q, not %q", ErrInvalidTicket, tk.Owner, owner)
	}
	switch {
	case tk.Principal == principal:
		return tk, nil
	case tk.Principal == "":
		return groupTicketClaims{}, errUnboundTicket
	}
	return groupTicketClaims{}, fmt.Errorf("%w: handed out to another principal", ErrInvalidTicket)
}

// groupTicketKey is the key of the record that makes group ticket id work once.
func (s *Service) groupTicketKey(id string) string {
	return s.space.prefix + "multi-ticket:{" + id + "}"
}

// redeemGroupTicket turns the group ticket value presented to wait for the sorted members names
// into what it resumes, taking its record (once): the zero groupResume when there is no ticket,
// it did not verify, it was taken or ran out, or Redis did not answer (the group then waits as a
// newcomer, which is always safe). It returns ErrInvalidTicket as parseGroupTicket does.
func (s *Service) redeemGroupTicket(ctx context.Context, value string, names []string, owner, principal string) (groupResume, error) {
	if value == "" {
		return groupResume{}, nil
	}
	tk, err := s.tokens.parseGroupTicket(value, names, owner, principal)
	switch {
	case errors.Is(err, errTicketIgnored):
		s.log.Warn("multi-lock queue ticket ignored: the group waits as a newcomer", "locks", names, "err", err)
		return groupResume{}, nil
	case err != nil:
		return groupResume{}, err
	}
	rc := s.dep.copies()[0]
	err = rc.Do(context.WithoutCancel(ctx), rc.B().Getdel().Key(s.groupTicketKey(tk.ID)).Build()).Error()
	switch {
	case rueidis.IsRedisNil(err): // used already, or past its grace
		return groupResume{}, nil
	case err != nil:
		s.log.Warn("taking a multi-lock's queue ticket failed: the group waits as a newcomer", "multilock", tk.Group, "err", err)
		return groupResume{}, nil
	}
	since := time.UnixMilli(tk.Since)
	if now := time.Now(); since.After(now) { // another replica's clock may be ahead
		since = now
	}
	memberTicket := s.tokens.mintTicket(ticketClaims{Lock: names[tk.Member], Owner: owner, ID: tk.Ticket,
		Principal: principal, Kind: KindLock.String()}) // the member's own ticket, as its wait handed it out
	return groupResume{group: tk.Group, since: since, member: tk.Member, memberTicket: memberTicket}, nil
}

// handOutGroupTicket records a group ticket for group m, whose wait started at since and ran out
// in the line of its member m.Locks[member] with that member's queue ticket memberTicket, and
// returns it: "" when the member's ticket does not parse or the record could not be written (the
// answer then carries none, and the next request waits as a newcomer).
func (s *Service) handOutGroupTicket(ctx context.Context, m MultiLease, since time.Time, member int, memberTicket string) string {
	ticketID, err := s.tokens.parseTicket(memberTicket, KindLock, m.Locks[member], m.Owner, m.Principal)
	if err != nil || ticketID == "" {
		return ""
	}
	id := uuid.NewString()
	rc := s.dep.copies()[0]
	err = rc.Do(context.WithoutCancel(ctx), rc.B().Set().Key(s.groupTicketKey(id)).Value("1").Px(s.cfg.ticketGrace).Build()).Error()
	if err != nil {
		s.log.Warn("recording a multi-lock's queue ticket failed: its next request waits as a newcomer", "multilock", m.ID, "err", err)
		return ""
	}
	return s.tokens.mintGroupTicket(groupTicketClaims{ID: id, Group: m.ID, Owner: m.Owner, Principal: m.Principal,
		Members: memberSetHash(m.Locks), Since: since.UnixMilli(), Member: member, Ticket: ticketID})
}
