package elections

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// listElections reads every page of GET /elections?prefix= in pages of limit, by name.
func listElections(t *testing.T, c *harness.Client, h harness.Headers, prefix string, limit int) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100, "the listing ends")
		r := c.Do(http.MethodGet, "/elections?prefix="+prefix+"&limit="+strconv.Itoa(limit)+"&cursor="+cursor, h, "")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		for _, e := range r.JSON()["elections"].([]any) {
			m := e.(map[string]any)
			out[m["election"].(string)] = m
		}
		if cursor = r.Str("next_cursor"); cursor == "" {
			return out
		}
	}
}

// TestElectionsAreListedWithTheirLeadersAndCandidates: GET /elections lists the elections led or
// with candidates under a prefix, each with its leader's value (as proclaimed) and its candidates,
// over pages; not the locks of the same names, nor an election nobody leads any more.
func TestElectionsAreListedWithTheirLeadersAndCandidates(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	c := e.Client
	const markup = `<img src=x onerror="alert(1)">&amp;`
	alpha := elect(t, c, "svc.alpha", "alpha-1", "10.0.0.1:80", 30000)
	require.Equal(t, http.StatusOK, proclaim(c, "svc.alpha", alpha.Str("token"), markup).Status)
	beta := elect(t, c, "svc.beta", "beta-1", "10.0.0.2:80", 30000)
	waiting := startCampaign(c, "svc.beta", "beta-2", "10.0.0.3:80", 30000, 30000)
	testkit.EventuallyPaced(t, 10*time.Second, "beta-2 in line", func() bool { return candidates(t, c, "svc.beta") == 1 })
	gone := elect(t, c, "svc.gone", "gone-1", "", 30000)
	require.Equal(t, http.StatusOK, resign(c, "svc.gone", gone.Str("token")).Status)
	elect(t, c, "other.x", "other", "", 30000)
	lock := c.Do(http.MethodPost, "/locks/svc.lock", nil, testkit.AcquireBody("locker", 30000))
	require.Equal(t, http.StatusCreated, lock.Status, "%s", lock.Body)

	for _, limit := range []int{1, 100} {
		got := listElections(t, c, nil, "svc.", limit)
		require.Len(t, got, 2, "limit %d: %v", limit, got)
		a := got["svc.alpha"]
		require.NotNil(t, a)
		assert.Equal(t, true, a["led"])
		assert.Zero(t, num(a, "candidates"))
		l := a["leader"].(map[string]any)
		assert.Equal(t, "alpha-1", l["owner"])
		assert.Equal(t, markup, l["value"], "the proclaimed value, from the leader record")
		assert.Equal(t, alpha.Int("fence"), num(l, "fence"))
		assert.Equal(t, alpha.Str("since"), l["since"])
		assert.Positive(t, num(l, "ttl_ms"))
		b := got["svc.beta"]
		require.NotNil(t, b)
		assert.Equal(t, int64(1), num(b, "candidates"))
		assert.Equal(t, "10.0.0.2:80", b["leader"].(map[string]any)["value"])
	}
	assert.Len(t, listElections(t, c, nil, "", 100), 3, "every prefix")

	// The candidate is elected when the leader resigns: the listing shows it.
	require.Equal(t, http.StatusOK, resign(c, "svc.beta", beta.Str("token")).Status)
	second := testkit.Receive(t, waiting, 10*time.Second, "beta-2's campaign")
	require.Equal(t, http.StatusCreated, second.Status, "%s", second.Body)
	b := listElections(t, c, nil, "svc.beta", 10)["svc.beta"]
	require.NotNil(t, b)
	assert.Equal(t, "beta-2", b["leader"].(map[string]any)["owner"])
	assert.Zero(t, num(b, "candidates"))

	r := c.Do(http.MethodGet, "/elections?limit=0", nil, "")
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, probInvalid, r.Str("type"))
}

// TestListingElectionsNeedsAdminOnThePrefix: GET /elections is an admin listing, as GET /locks.
func TestListingElectionsNeedsAdminOnThePrefix(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	c := e.Client
	a := c.Do(http.MethodPost, "/elections/billing.leader", e.As("billing"), campaignBody("a", "v", 30000, 0, ""))
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)

	assert.Equal(t, http.StatusUnauthorized, c.Do(http.MethodGet, "/elections", nil, "").Status)
	r := c.Do(http.MethodGet, "/elections?prefix=billing.", e.As("inspect-only"), "")
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	assert.Equal(t, "admin", r.Str("permission"))
	r = c.Do(http.MethodGet, "/elections", e.As("billing-ops"), "")
	require.Equal(t, http.StatusForbidden, r.Status, "every name needs admin on \"*\": %s", r.Body)
	assert.Contains(t, listElections(t, c, e.As("billing-ops"), "billing.", 100), "billing.leader")
	assert.Contains(t, listElections(t, c, e.As("ops"), "", 100), "billing.leader")
}
