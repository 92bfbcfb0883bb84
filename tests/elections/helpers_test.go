package elections

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// Problem types, spelled out so that a renamed constant breaks the tests (api/problem.go).
const (
	probElectionLed  = "urn:leasegate:problem:election-led"
	probInvalidToken = "urn:leasegate:problem:invalid-lease-token"
	probLeaseGone    = "urn:leasegate:problem:lease-gone"
	probInvalid      = "urn:leasegate:problem:invalid-request"
	probForbidden    = "urn:leasegate:problem:forbidden"
)

// campaignBody is a campaign's body: owner, value, TTL and wait (0: try once), and extra members.
func campaignBody(owner, value string, ttlMs, waitMs int64, extra string) string {
	v, _ := json.Marshal(value)
	return fmt.Sprintf(`{"owner":%q,"value":%s,"ttl_ms":%d,"wait_ms":%d%s}`, owner, v, ttlMs, waitMs, extra)
}

// campaign runs one campaign and returns its answer.
func campaign(c *harness.Client, election, owner, value string, ttlMs, waitMs int64) *harness.Response {
	return c.Do(http.MethodPost, "/elections/"+election, nil, campaignBody(owner, value, ttlMs, waitMs, ""))
}

// startCampaign runs a waiting campaign in a goroutine; its answer arrives on the channel.
func startCampaign(c *harness.Client, election, owner, value string, ttlMs, waitMs int64) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	go func() { out <- campaign(c, election, owner, value, ttlMs, waitMs) }()
	return out
}

// elect campaigns once and requires the 201.
func elect(t *testing.T, c *harness.Client, election, owner, value string, ttlMs int64) *harness.Response {
	t.Helper()
	r := campaign(c, election, owner, value, ttlMs, 0)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	return r
}

func proclaim(c *harness.Client, election, token, value string) *harness.Response {
	v, _ := json.Marshal(value)
	return c.Do(http.MethodPut, "/elections/"+election, testkit.TokenHeader(token), `{"value":`+string(v)+`}`)
}

func resign(c *harness.Client, election, token string) *harness.Response {
	return c.Do(http.MethodDelete, "/elections/"+election, testkit.TokenHeader(token), "")
}

// state reads GET /elections/{name}.
func state(t *testing.T, c *harness.Client, election string) *harness.Response {
	t.Helper()
	r := c.Do(http.MethodGet, "/elections/"+election, nil, "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	return r
}

// candidates is how many candidates wait in election's line.
func candidates(t *testing.T, c *harness.Client, election string) int64 {
	return state(t, c, election).Int("candidates")
}

// leader returns GET /elections/{name}'s leader object (nil while nobody leads).
func leader(t *testing.T, c *harness.Client, election string) map[string]any {
	t.Helper()
	l, _ := state(t, c, election).JSON()["leader"].(map[string]any)
	return l
}

// num reads a json.Number member of m.
func num(m map[string]any, key string) int64 {
	n, _ := m[key].(json.Number)
	v, _ := n.Int64()
	return v
}

// eventID is an election event's id, compared in the log's order.
type eventID struct{ ms, seq uint64 }

func parseEventID(t *testing.T, s string) eventID {
	t.Helper()
	a, b, ok := strings.Cut(s, "-")
	require.True(t, ok, "event id %q", s)
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	require.NoError(t, err1, "event id %q", s)
	require.NoError(t, err2, "event id %q", s)
	return eventID{ms, seq}
}

func (a eventID) before(b eventID) bool { return a.ms < b.ms || a.ms == b.ms && a.seq < b.seq }

// observe opens GET /elections/{name}/events on base, resuming after lastEventID when not "".
func observe(t *testing.T, base, election, lastEventID string) *testkit.EventStream {
	t.Helper()
	h := harness.Headers{}
	if lastEventID != "" {
		h["Last-Event-ID"] = lastEventID
	}
	return testkit.OpenEvents(t, base, "/elections/"+election+"/events", h)
}

// bg is a context for requests the test abandons on purpose.
var bg = context.Background()
