package elections

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// with merges header sets.
func with(hs ...harness.Headers) harness.Headers {
	out := harness.Headers{}
	for _, h := range hs {
		for k, v := range h {
			out[k] = v
		}
	}
	return out
}

// authEnv is a plain HTTP gateway with an auth file of testkit.Principals (event streams are read
// with http.DefaultClient).
type authEnv struct {
	*testkit.Env
	principals map[string]*testkit.Principal
}

func newAuthEnv(t *testing.T, gwEnv map[string]string) *authEnv {
	t.Helper()
	ps := testkit.Principals()
	path := filepath.Join(t.TempDir(), "auth.json")
	require.NoError(t, os.WriteFile(path, testkit.AuthFile(ps), 0o600))
	env := map[string]string{"LEASEGATE_AUTH_FILE": path}
	for k, v := range gwEnv {
		env[k] = v
	}
	return &authEnv{Env: testkit.NewEnv(t, env), principals: ps}
}

func (e *authEnv) As(name string) harness.Headers {
	return harness.Headers{"Authorization": "Bearer " + e.principals[name].Key}
}

func TestElectionsNeedTheLocksPermissionsAndPrefixes(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	c := e.Client
	body := campaignBody("a", "10.0.0.1:80", 30000, 0, "")

	r := c.Do(http.MethodPost, "/elections/billing.leader", nil, body)
	assert.Equal(t, http.StatusUnauthorized, r.Status, "%s", r.Body)
	r = c.Do(http.MethodPost, "/elections/other.leader", e.As("billing"), body)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	assert.Equal(t, probForbidden, r.Str("type"))
	assert.Equal(t, "other.leader", r.Str("name"))
	r = c.Do(http.MethodPost, "/elections/billing.leader", e.As("reader"), body)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	assert.Equal(t, "lock", r.Str("permission"))

	a := c.Do(http.MethodPost, "/elections/billing.leader", e.As("billing"), body)
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	token := testkit.TokenHeader(a.Str("token"))

	// inspect reads and observes; lock proclaims and resigns, with its own principal's token only.
	r = c.Do(http.MethodGet, "/elections/billing.leader", e.As("reader"), "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, true, r.JSON()["led"])
	s := testkit.OpenEvents(t, e.Gateway.URL, "/elections/billing.leader/events", e.As("reader"))
	st := s.Expect(t, "state", "")
	assert.Equal(t, "billing.leader", st.Str("election"))
	assert.Equal(t, true, st.Data["led"])
	r = c.Do(http.MethodGet, "/elections/other.leader/events", e.As("reader"), "")
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	r = c.Do(http.MethodPut, "/elections/billing.leader", with(e.As("billing-2"), token), `{"value":"x"}`)
	require.Equal(t, http.StatusForbidden, r.Status, "another principal's token: %s", r.Body)
	r = c.Do(http.MethodPut, "/elections/billing.leader", with(e.As("reader"), token), `{"value":"x"}`)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	r = c.Do(http.MethodDelete, "/elections/billing.leader?force=true", e.As("billing"), "")
	require.Equal(t, http.StatusForbidden, r.Status, "a force release needs admin: %s", r.Body)
	assert.Equal(t, "admin", r.Str("permission"))

	r = c.Do(http.MethodPut, "/elections/billing.leader", with(e.As("billing"), token), `{"value":"10.0.0.1:81"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = c.Do(http.MethodDelete, "/elections/billing.leader", with(e.As("billing"), token), "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	s.Expect(t, "proclaimed", "a") // the state had the leader

	s.Expect(t, "resigned", "a")
}

// TestClosedCarriesNoIDSoAReconnectionResumes: a stream the gateway closes (here at its maximum
// lifetime) ends with "closed", which has no id: an EventSource keeps the last event's id and
// resumes after it.
func TestClosedCarriesNoIDSoAReconnectionResumes(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_MAX_STREAM_LIFETIME": "1s"})
	s := observe(t, e.Gateway.URL, "life", "")
	s.Expect(t, "state", "")
	a := elect(t, e.Client, "life", "a", "v", 30000)
	el := s.Expect(t, "elected", "a")
	closed := s.Expect(t, "closed", "")
	assert.Empty(t, closed.ID)
	assert.Equal(t, "lifetime", closed.Str("reason"))
	assert.Equal(t, "life", closed.Str("election"))
	s.Ended(t, 5*time.Second)
	require.Equal(t, http.StatusOK, resign(e.Client, "life", a.Str("token")).Status)
	again := observe(t, e.Gateway.URL, "life", el.ID)
	assert.Equal(t, a.Int("fence"), again.Expect(t, "resigned", "a").Int("fence"))
}
