package lockcore

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// A queue ticket lets a waiter keep its place in a lock's FIFO queue across successive long-polls.
// A wait that runs out leaves the queue and is handed a ticket: its arrival time in the queue and
// the Redis time until which that arrival counts (TicketGrace after the wait ended). A waiting
// acquire that presents the ticket before then queues at that arrival, ahead of everyone who came
// later. Tickets are signed like lease tokens (in a domain of their own), so no one can forge an
// earlier arrival; a ticket that has run out is not an error, the waiter just queues as a newcomer.
type ticket struct {
	V       int    `json:"v"`
	Lock    string `json:"lock"`
	Owner   string `json:"owner"`
	Arrival int64  `json:"arrival_us"` // Redis time
	Until   int64  `json:"until_ms"`   // Redis time
}

func (t *Tokens) mintTicket(tk ticket) string {
	tk.V = 1
	payload, _ := json.Marshal(tk) // cannot fail: strings and ints only
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + base64.RawURLEncoding.EncodeToString(t.sign(ticketDomain, p))
}

// parseTicket verifies value and returns its ticket. It returns ErrInvalidTicket when value is
// malformed or forged, or was handed to another lock or owner.
func (t *Tokens) parseTicket(value, lock, owner string) (ticket, error) {
	if len(value) > maxTokenLen {
		return ticket{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidTicket, maxTokenLen)
	}
	raw, err := t.verify(ticketDomain, value)
	if err != nil {
		return ticket{}, fmt.Errorf("%w: %v", ErrInvalidTicket, err)
	}
	var tk ticket
	if err := json.Unmarshal(raw, &tk); err != nil || tk.V != 1 || tk.Arrival <= 0 || tk.Until <= 0 {
		return ticket{}, fmt.Errorf("%w: payload is not a version 1 queue ticket", ErrInvalidTicket)
	}
	if tk.Lock != lock {
		return ticket{}, fmt.Errorf("%w: handed out for lock %q, not %q", ErrInvalidTicket, tk.Lock, lock)
	}
	if tk.Owner != owner {
		return ticket{}, fmt.Errorf("%w: handed out to owner %q, not %q", ErrInvalidTicket, tk.Owner, owner)
	}
	return tk, nil
}
