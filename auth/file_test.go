package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
)

// principal renders one principal of an auth file.
func principal(name, hash, prefixes, perms string) string {
	return `{"name":"` + name + `","keys":["` + hash + `"],"prefixes":[` + prefixes + `],"permissions":[` + perms + `]}`
}

func file(principals ...string) []byte {
	return []byte(`{"principals":[` + strings.Join(principals, ",") + `]}`)
}

func TestParseAuthenticates(t *testing.T) {
	billingKey, billingHash := auth.NewKey()
	opsKey, opsHash := auth.NewKey()
	c, err := auth.Parse(file(
		principal("billing", billingHash, `"billing.","shared.reports."`, `"lock","inspect"`),
		principal("ops", opsHash, `"*"`, `"admin"`)))
	require.NoError(t, err)

	p, err := c.Authenticate(billingKey)
	require.NoError(t, err)
	assert.Equal(t, "billing", p.Name)
	assert.True(t, p.Has(auth.Lock))
	assert.False(t, p.Has(auth.Admin))
	assert.True(t, p.AllowsName("billing.invoices"))
	assert.True(t, p.AllowsName("shared.reports.q3"))
	assert.False(t, p.AllowsName("shared.other"))
	assert.False(t, p.AllowsAll())

	p, err = c.Authenticate(opsKey)
	require.NoError(t, err)
	assert.Equal(t, "ops", p.Name)
	assert.True(t, p.AllowsAll())

	for _, key := range []string{"", "lgk_nope", billingHash, strings.Repeat("k", 1000)} {
		_, err := c.Authenticate(key)
		assert.ErrorIs(t, err, auth.ErrUnauthenticated, "key %q", key)
	}
}

func TestParseRefuses(t *testing.T) {
	_, h := auth.NewKey()
	_, h2 := auth.NewKey()
	ok := principal("billing", h, `"billing."`, `"lock"`)
	for _, tc := range []struct {
		name, data, want string
	}{
		{"not JSON", `{`, "not a valid auth file"},
		{"unknown member", `{"principals":[],"extra":1}`, "unknown field"},
		{"member in another case", `{"Principals":[` + ok + `]}`, "lower case"},
		{"nested member in another case", `{"principals":[{"name":"a","Keys":["` + h + `"],"prefixes":["*"],"permissions":["lock"]}]}`, "lower case"},
		{"trailing data", string(file(ok)) + `{}`, "unexpected data"},
		{"no principals", `{"principals":[]}`, "empty"},
		{"jwt incomplete", `{"principals":[` + ok + `],"jwt":{"jwks_file":"x"}}`, `"issuer" and "audience" are required`},
		{"jwt unknown member", `{"principals":[` + ok + `],"jwt":{"jwks_url":"x"}}`, "unknown field"},
		{"subject empty", `{"principals":[{"name":"a","keys":["` + h + `"],"prefixes":["*"],"permissions":["lock"],"certificate_subjects":[""]}]}`, "certificate subject"},
		{"bad name", string(file(principal("a b", h, `"*"`, `"lock"`))), `"name"`},
		{"duplicate name", string(file(ok, principal("billing", h2, `"*"`, `"lock"`))), "given twice"},
		{"key in clear", string(file(principal("a", "lgk_secretsecretsecret", `"*"`, `"lock"`))), `"lgk_secretse…"`},
		{"upper-case hash", string(file(principal("a", strings.ToUpper(h), `"*"`, `"lock"`))), "not \"sha256:\""},
		{"no keys", `{"principals":[{"name":"a","keys":[],"prefixes":["*"],"permissions":["lock"]}]}`, `"keys" is empty`},
		{"key of two principals", string(file(ok, principal("other", h, `"*"`, `"lock"`))), "a key names one principal"},
		{"no prefixes", string(file(principal("a", h, ``, `"lock"`))), `"prefixes" is empty`},
		{"bad prefix", string(file(principal("a", h, `"billing/"`, `"lock"`))), `prefix "billing/"`},
		{"no permissions", string(file(principal("a", h, `"*"`, ``))), `"permissions" is empty`},
		{"unknown permission", string(file(principal("a", h, `"*"`, `"write"`))), `permission "write"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.Parse([]byte(tc.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestAuthorize(t *testing.T) {
	_, h := auth.NewKey()
	c, err := auth.Parse(file(principal("billing", h, `"billing."`, `"lock","admin"`)))
	require.NoError(t, err)
	p := c.Principals[0]

	assert.NoError(t, p.Authorize(auth.Lock, "billing.a", "billing.b"))
	var denied *auth.ForbiddenError
	require.ErrorAs(t, p.Authorize(auth.Inspect, "billing.a"), &denied)
	assert.Equal(t, auth.Inspect, denied.Permission)
	assert.Contains(t, denied.Error(), `lacks the "inspect" permission`)

	require.ErrorAs(t, p.Authorize(auth.Lock, "billing.a", "orders.1"), &denied)
	assert.Equal(t, "orders.1", denied.Name)
	assert.Contains(t, denied.Error(), `may not use the name "orders.1"`)
	assert.Contains(t, denied.Error(), `"billing."`)

	assert.NoError(t, p.AuthorizeListing(auth.Admin, "billing.inv"))
	require.ErrorAs(t, p.AuthorizeListing(auth.Admin, ""), &denied)
	assert.True(t, denied.Listing)
	require.ErrorAs(t, p.AuthorizeAll(auth.Admin), &denied)
	assert.Contains(t, denied.Error(), `lacks the prefix "*"`)

	assert.NoError(t, p.TokenOwner("billing"))
	require.ErrorAs(t, p.TokenOwner("ops"), &denied)
	assert.Contains(t, denied.Error(), `belongs to principal "ops"`)
	require.ErrorAs(t, p.TokenOwner(""), &denied)
	assert.Contains(t, denied.Error(), "minted without authentication")
	assert.False(t, errors.Is(denied, auth.ErrUnauthenticated))
}

func TestHashKey(t *testing.T) {
	key, hash := auth.NewKey()
	assert.True(t, strings.HasPrefix(key, "lgk_"))
	assert.Len(t, key, 4+43)
	assert.Equal(t, auth.HashKey(key), hash)
	// The documented form: sha256 of the key's bytes, in lower-case hex.
	assert.Equal(t, "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", auth.HashKey("foo"))
	other, _ := auth.NewKey()
	assert.NotEqual(t, key, other)
}

// TestParseQuotas: a principal's own "quotas" are read as given (absent members stay nil, 0 is
// kept: no limit), negative ones and misspelt member names are refused.
func TestParseQuotas(t *testing.T) {
	_, h := auth.NewKey()
	_, h2 := auth.NewKey()
	withQuotas := func(name, hash, quotas string) string {
		return `{"name":"` + name + `","keys":["` + hash + `"],"prefixes":["*"],"permissions":["lock"],"quotas":` + quotas + `}`
	}
	c, err := auth.Parse(file(withQuotas("batch", h, `{"rate":2.5,"burst":10,"parked":0,"held":500}`), principal("plain", h2, `"*"`, `"lock"`)))
	require.NoError(t, err)
	q := c.Principals[0].Quotas
	require.NotNil(t, q.Rate)
	require.NotNil(t, q.Burst)
	require.NotNil(t, q.Parked)
	require.NotNil(t, q.Held)
	assert.Equal(t, 2.5, *q.Rate)
	assert.Equal(t, 10, *q.Burst)
	assert.Equal(t, 0, *q.Parked)
	assert.Equal(t, 500, *q.Held)
	assert.Equal(t, auth.Quotas{}, c.Principals[1].Quotas)
	assert.Equal(t, "batch", c.OwnHeldQuota())

	for _, tc := range []struct{ quotas, want string }{
		{`{"held":-1}`, `"held" must not be negative`},
		{`{"rate":-0.5}`, `"rate" must not be negative`},
		{`{"Held":5}`, "Held"},
		{`{"held":"5"}`, "not a valid auth file"},
		{`{"held":5,"extra":1}`, "unknown field"},
	} {
		_, err := auth.Parse(file(withQuotas("batch", h, tc.quotas)))
		assert.ErrorContains(t, err, tc.want, tc.quotas)
	}
}
