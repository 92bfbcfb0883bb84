package lockcore_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

var testGroup = lockcore.MultiLease{ID: "m-" + testLeaseID, Owner: "mover", Locks: []string{"acct.17", "acct.42"}, Mode: lockcore.Exclusive}

func TestMultiTokenRoundTrips(t *testing.T) {
	tokens := newTokens(t, testSecret)
	token := tokens.MintMulti(testGroup)
	got, err := tokens.ParseMulti(token, "")
	require.NoError(t, err)
	assert.Equal(t, testGroup, got)
	got, err = tokens.ParseMulti(token, testGroup.ID)
	require.NoError(t, err, "its own id")
	assert.Equal(t, testGroup, got)
	assert.Equal(t, testGroup.ID, lockcore.GroupOf(testGroup.ID))
	assert.Empty(t, lockcore.GroupOf(testLeaseID))
}

func TestMultiTokenRefusals(t *testing.T) {
	tokens := newTokens(t, testSecret)
	token := tokens.MintMulti(testGroup)
	for name, tc := range map[string]struct{ token, id string }{
		"empty":            {"", ""},
		"another group":    {token, "m-00000000-0000-4000-8000-000000000000"},
		"altered":          {harness.AlterSignature(token), ""},
		"another secret":   {newTokens(t, otherSecret).MintMulti(testGroup), ""},
		"a lock's token":   {tokens.Mint(testLease), ""},
		"a plain payload":  {signed(testSecret, `{"v":1,"lease":"m-`+testLeaseID+`","locks":["a","b"],"mode":"exclusive"}`), ""},
		"unsorted members": {tokens.MintMulti(lockcore.MultiLease{ID: testGroup.ID, Locks: []string{"b", "a"}, Mode: lockcore.Exclusive}), ""},
		"one member":       {tokens.MintMulti(lockcore.MultiLease{ID: testGroup.ID, Locks: []string{"a"}, Mode: lockcore.Exclusive}), ""},
		"bare uuid lease":  {tokens.MintMulti(lockcore.MultiLease{ID: testLeaseID, Locks: []string{"a", "b"}, Mode: lockcore.Exclusive}), ""},
	} {
		_, err := tokens.ParseMulti(tc.token, tc.id)
		assert.ErrorIs(t, err, lockcore.ErrInvalidToken, name)
	}
	// And the other way round: a group's token is no lock's.
	_, err := tokens.Parse(token, lockcore.LockRef("acct.17"))
	assert.ErrorIs(t, err, lockcore.ErrInvalidToken)
	assert.Contains(t, err.Error(), "multi-lock")
}
