package lockcore

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupTicketIsBoundToItsMembersOwnerAndPrincipal: a group queue ticket parses for the set of
// locks, owner and principal it was handed out for; another set (even one more or one fewer
// member), owner or principal, a lock's ticket, or a group's ticket at a lock is refused with
// ErrInvalidTicket, and one that does not verify is ignored.
func TestGroupTicketIsBoundToItsMembersOwnerAndPrincipal(t *testing.T) {
	tokens, err := NewTokens([]byte(strings.Repeat("s", 32)))
	require.NoError(t, err)
	other, err := NewTokens([]byte(strings.Repeat("o", 32)))
	require.NoError(t, err)
	names := []string{"acct.17", "acct.42"}
	claims := groupTicketClaims{ID: uuid.NewString(), Group: "m-" + uuid.NewString(), Owner: "mover", Principal: "billing",
		Members: memberSetHash(names), Since: 1765000000000, Member: 1, Ticket: uuid.NewString()}
	ticket := tokens.mintGroupTicket(claims)
	lockTicket := tokens.mintTicket(ticketClaims{Lock: "acct.42", Owner: "mover", ID: uuid.NewString(), Principal: "billing", Kind: "lock"})

	got, err := tokens.parseGroupTicket(ticket, names, "mover", "billing")
	require.NoError(t, err)
	claims.V, claims.Kind = 1, groupTicketKind
	assert.Equal(t, claims, got)

	for _, tc := range []struct {
		name             string
		ticket           string
		names            []string
		owner, principal string
		invalid, ignored bool
	}{
		{name: "another set", ticket: ticket, names: []string{"acct.17", "acct.99"}, owner: "mover", principal: "billing", invalid: true},
		{name: "one more member", ticket: ticket, names: []string{"acct.17", "acct.42", "acct.99"}, owner: "mover", principal: "billing", invalid: true},
		{name: "another owner", ticket: ticket, names: names, owner: "thief", principal: "billing", invalid: true},
		{name: "another principal", ticket: ticket, names: names, owner: "mover", principal: "ops", invalid: true},
		{name: "a lock's ticket", ticket: lockTicket, names: names, owner: "mover", principal: "billing", invalid: true},
		{name: "too long", ticket: ticket + strings.Repeat("x", maxTokenLen), names: names, owner: "mover", principal: "billing", invalid: true},
		{name: "another secret", ticket: other.mintGroupTicket(claims), names: names, owner: "mover", principal: "billing", ignored: true},
		{name: "altered", ticket: "x" + ticket, names: names, owner: "mover", principal: "billing", ignored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tokens.parseGroupTicket(tc.ticket, tc.names, tc.owner, tc.principal)
			require.Error(t, err)
			assert.Equal(t, tc.invalid, errors.Is(err, ErrInvalidTicket), "%v", err)
			assert.Equal(t, tc.ignored, errors.Is(err, errTicketIgnored), "%v", err)
		})
	}

	unbound := claims
	unbound.Principal = ""
	_, err = tokens.parseGroupTicket(tokens.mintGroupTicket(unbound), names, "mover", "billing")
	assert.ErrorIs(t, err, errUnboundTicket, "handed to no principal, presented by one: a newcomer")

	_, err = tokens.parseTicket(ticket, KindLock, "acct.42", "mover", "billing")
	assert.ErrorIs(t, err, ErrInvalidTicket, "a group's ticket at a lock")
	assert.Contains(t, err.Error(), "multi-lock")
}
