package lockcore

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
)

// A queue ticket lets a waiter keep its place in a lock's FIFO queue across successive long-polls.
// A wait that runs out (or is ended by a gateway shutting down) leaves the queue and keeps its
// arrival time in Redis under a fresh ticket ID for TicketGrace; the answer carries the ticket, a
// signed reference to that record. The next waiting acquire that presents it queues at that
// arrival, ahead of everyone who came later. The record is taken when presented, so a ticket works
// once: a copy, or a ticket presented again after its wait was granted, queues as a newcomer, as
// does one presented after the grace. Tickets are signed like lease tokens (in a domain of their
// own), so nobody can forge a reference to another waiter's place, and carry the principal they
// were handed to, so that nobody else can take that place with them.
type ticketClaims struct {
	V     int    `json:"v"`
	Lock  string `json:"lock"`
	Owner string `json:"owner"`
	ID    string `json:"id"`
	// Principal is the authenticated caller the ticket was handed to ("": none). Tickets minted
	// by builds before 2026-11 carry none.
	Principal string `json:"principal,omitempty"`
	// Kind is what the name is ("lock", "semaphore", "election"): a ticket is no use on another kind
	// of the same name. Tickets minted before 2026-12-06 carry none, and are taken for any kind.
	Kind string `json:"kind,omitempty"`
}

func (t *Tokens) mintTicket(tk ticketClaims) string {
	tk.V = 1
	payload, _ := json.Marshal(tk) // cannot fail: strings and ints only
	return t.seal(ticketDomain, payload)
}

// parseTicket returns the ID of the queue ticket value. A ticket that does not verify (signed with
// another secret, say by a replica configured differently or before a restart with a random
// secret, or altered) yields "" and errTicketIgnored: the caller queues as a newcomer. It
// returns ErrInvalidTicket for a verified ticket handed to another lock, owner or principal, or
// too long. A ticket without a principal presented by an authenticated caller was minted by an
// older build, or with authentication off: it yields "" and errUnboundTicket, and the caller
// queues as a newcomer.
func (t *Tokens) parseTicket(value string, kind Kind, lock, owner, principal string) (string, error) {
	if len(value) > maxTokenLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalidTicket, maxTokenLen)
	}
	raw, err := t.verify(ticketDomain, value)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errTicketIgnored, err)
	}
	var tk ticketClaims
	if err := json.Unmarshal(raw, &tk); err != nil || tk.V != 1 || uuid.Validate(tk.ID) != nil {
		return "", fmt.Errorf("%w: payload is not a version 1 queue ticket", ErrInvalidTicket)
	}
	if tk.Kind == groupTicketKind {
		return "", fmt.Errorf("%w: handed out to wait for a multi-lock, not the %s %q", ErrInvalidTicket, kind, lock)
	}
	if tk.Lock != lock {
		return "", fmt.Errorf("%w: handed out for lock %q, not %q", ErrInvalidTicket, tk.Lock, lock)
	}
	if tk.Kind != "" && tk.Kind != kind.String() {
		return "", fmt.Errorf("%w: handed out to wait for the %s %q, not the %s", ErrInvalidTicket, tk.Kind, tk.Lock, kind)
	}
	if tk.Owner != owner {
		return "", fmt.Errorf("%w: handed out to owner %q, not %q", ErrInvalidTicket, tk.Owner, owner)
	}
	switch {
	case tk.Principal == principal:
		return tk.ID, nil
	case tk.Principal == "":
		return "", errUnboundTicket
	}
	return "", fmt.Errorf("%w: handed out to another principal", ErrInvalidTicket)
}
