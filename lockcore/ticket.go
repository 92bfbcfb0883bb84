package lockcore

import (
	"encoding/base64"
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
// own), so nobody can forge a reference to another waiter's place.
type ticketClaims struct {
	V     int    `json:"v"`
	Lock  string `json:"lock"`
	Owner string `json:"owner"`
	ID    string `json:"id"`
}

func (t *Tokens) mintTicket(tk ticketClaims) string {
	tk.V = 1
	payload, _ := json.Marshal(tk) // cannot fail: strings and ints only
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + base64.RawURLEncoding.EncodeToString(t.sign(ticketDomain, p))
}

// parseTicket returns the ID of the queue ticket value. A ticket that does not verify (signed with
// another secret, say by a replica configured differently or before a restart with a random
// secret, or altered) yields "" and errBadTicketSignature: the caller queues as a newcomer. It
// returns ErrInvalidTicket for a verified ticket handed to another lock or owner, or too long.
func (t *Tokens) parseTicket(value, lock, owner string) (string, error) {
	if len(value) > maxTokenLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalidTicket, maxTokenLen)
	}
	raw, err := t.verify(ticketDomain, value)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errBadTicketSignature, err)
	}
	var tk ticketClaims
	if err := json.Unmarshal(raw, &tk); err != nil || tk.V != 1 || uuid.Validate(tk.ID) != nil {
		return "", fmt.Errorf("%w: payload is not a version 1 queue ticket", ErrInvalidTicket)
	}
	if tk.Lock != lock {
		return "", fmt.Errorf("%w: handed out for lock %q, not %q", ErrInvalidTicket, tk.Lock, lock)
	}
	if tk.Owner != owner {
		return "", fmt.Errorf("%w: handed out to owner %q, not %q", ErrInvalidTicket, tk.Owner, owner)
	}
	return tk.ID, nil
}
