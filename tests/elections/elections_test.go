package elections

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

func TestCampaignObserveProclaimResign(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	s := observe(t, p.Gateway.URL, "sched", "")
	st := s.Expect(t, "state", "")
	assert.Equal(t, "0-0", st.ID)
	assert.Equal(t, false, st.Data["led"])
	assert.Equal(t, "0-0", st.Str("last_event_id"))

	a := elect(t, p.Client, "sched", "a", "10.0.0.1:80", 30000)
	assert.Equal(t, "/elections/sched", a.Header.Get("Location"))
	assert.Equal(t, "10.0.0.1:80", a.Str("value"))
	assert.Equal(t, "sched", a.Str("election"))
	el := s.Expect(t, "elected", "a")
	assert.Equal(t, a.Str("event_id"), el.ID)
	assert.Equal(t, a.Int("fence"), el.Int("fence"))
	assert.Equal(t, "10.0.0.1:80", el.Str("value"))
	assert.Equal(t, "sched", el.Str("election"))

	// Another candidate, on the other replica, is refused at once, then waits in line.
	r := campaign(p.Client2, "sched", "b", "10.0.0.2:80", 30000, 0)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Equal(t, probElectionLed, r.Str("type"))
	assert.Equal(t, "sched", r.Str("election"))
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	b := startCampaign(p.Client2, "sched", "b", "10.0.0.2:80", 30000, 20000)
	testkit.EventuallyPaced(t, 10*time.Second, "b in line", func() bool { return candidates(t, p.Client, "sched") == 1 })

	got := state(t, p.Client2, "sched")
	assert.Equal(t, true, got.JSON()["led"])
	l := leader(t, p.Client2, "sched")
	assert.Equal(t, "a", l["owner"])
	assert.Equal(t, "10.0.0.1:80", l["value"])
	assert.Equal(t, a.Int("fence"), num(l, "fence"))
	assert.Equal(t, a.Str("event_id"), l["event_id"])

	pr := proclaim(p.Client2, "sched", a.Str("token"), "10.0.0.1:81")
	require.Equal(t, http.StatusOK, pr.Status, "%s", pr.Body)
	assert.Equal(t, "10.0.0.1:81", pr.Str("value"))
	assert.Equal(t, a.Int("fence"), pr.Int("fence"))
	pe := s.Expect(t, "proclaimed", "a")
	assert.Equal(t, "10.0.0.1:81", pe.Str("value"))
	assert.Equal(t, pr.Str("event_id"), pe.ID)
	again := proclaim(p.Client, "sched", a.Str("token"), "10.0.0.1:81")
	require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
	assert.Equal(t, pr.Str("event_id"), again.Str("event_id"), "the same value announces nothing")

	rs := resign(p.Client, "sched", a.Str("token"))
	require.Equal(t, http.StatusOK, rs.Status, "%s", rs.Body)
	assert.Equal(t, true, rs.JSON()["resigned"])
	assert.Equal(t, a.Int("fence"), rs.Int("fence"))
	gb := testkit.Receive(t, b, 10*time.Second, "b's campaign")
	require.Equal(t, http.StatusCreated, gb.Status, "%s", gb.Body)
	assert.Greater(t, gb.Int("fence"), a.Int("fence"))
	re := s.Expect(t, "resigned", "a")
	assert.Equal(t, rs.Str("event_id"), re.ID)
	assert.Equal(t, a.Int("fence"), re.Int("fence"))
	_, hasValue := re.Data["value"]
	assert.False(t, hasValue, "a resignation carries no value")
	eb := s.Expect(t, "elected", "b")
	assert.Equal(t, gb.Int("fence"), eb.Int("fence"))
	assert.Equal(t, "10.0.0.2:80", eb.Str("value"))

	// The old leader's token is over; ids rise in the log's order.
	assert.Equal(t, http.StatusGone, proclaim(p.Client, "sched", a.Str("token"), "x").Status)
	assert.Equal(t, http.StatusGone, resign(p.Client, "sched", a.Str("token")).Status)
	prev := parseEventID(t, st.ID)
	for _, ev := range []testkit.SSEEvent{el, pe, re, eb} {
		id := parseEventID(t, ev.ID)
		assert.True(t, prev.before(id), "%s after %v", ev.ID, prev)
		prev = id
	}
	assert.Equal(t, eb.ID, state(t, p.Client, "sched").Str("last_event_id"))

	// A leader renews its lease like a lock's holder.
	rn := p.Client.Do(http.MethodPost, "/elections/sched/renew", testkit.TokenHeader(gb.Str("token")), `{"ttl_ms":60000}`)
	require.Equal(t, http.StatusOK, rn.Status, "%s", rn.Body)
	assert.Equal(t, int64(60000), rn.Int("ttl_ms"))
}

func TestCandidatesAreElectedInArrivalOrder(t *testing.T) {
	t.Parallel()
	p := testkit.NewPair(t)
	s := observe(t, p.Gateway.URL, "fifo", "")
	s.Expect(t, "state", "")
	a := elect(t, p.Client, "fifo", "a", "a", 30000)
	s.Expect(t, "elected", "a")
	owners := []string{"c1", "c2", "c3", "c4"}
	answers := map[string]<-chan *harness.Response{}
	for i, o := range owners {
		answers[o] = startCampaign(p.Replica(i), "fifo", o, o+":80", 30000, 30000)
		want := int64(i + 1)
		testkit.EventuallyPaced(t, 10*time.Second, o+" in line", func() bool { return candidates(t, p.Client, "fifo") == want })
	}
	token, fence := a.Str("token"), a.Int("fence")
	for i, o := range owners {
		require.Equal(t, http.StatusOK, resign(p.Replica(i+1), "fifo", token).Status)
		got := testkit.Receive(t, answers[o], 10*time.Second, o+"'s campaign")
		require.Equal(t, http.StatusCreated, got.Status, "%s", got.Body)
		assert.Equal(t, o, got.Str("owner"), "elected in arrival order")
		assert.Greater(t, got.Int("fence"), fence)
		s.Expect(t, "resigned", "")
		assert.Equal(t, got.Int("fence"), s.Expect(t, "elected", o).Int("fence"))
		token, fence = got.Str("token"), got.Int("fence")
	}
}

func TestLapseIsAnnouncedVacant(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	s := observe(t, e.Gateway.URL, "lapse", "")
	s.Expect(t, "state", "")
	a := elect(t, e.Client, "lapse", "a", "v", 500)
	s.Expect(t, "elected", "a")
	v := s.Expect(t, "vacant", "a")
	assert.Equal(t, a.Int("fence"), v.Int("fence"))
	expires, err := time.Parse(time.RFC3339Nano, a.Str("expires_at"))
	require.NoError(t, err)
	assert.WithinDuration(t, expires, v.At, time.Second, "announced at the lease's expiry")
	assert.Equal(t, false, state(t, e.Client, "lapse").JSON()["led"])
	assert.Equal(t, http.StatusGone, proclaim(e.Client, "lapse", a.Str("token"), "x").Status)

	// Unobserved, a lapse is announced by the next leader's election, just before it.
	b := elect(t, e.Client, "quiet", "b", "v", 300)
	wc := startCampaign(e.Client, "quiet", "c", "w", 30000, 10000)
	c := testkit.Receive(t, wc, 10*time.Second, "c's campaign")
	require.Equal(t, http.StatusCreated, c.Status, "%s", c.Body)
	s2 := observe(t, e.Gateway.URL, "quiet", "0-0")
	assert.Equal(t, b.Int("fence"), s2.Expect(t, "elected", "b").Int("fence"))
	assert.Equal(t, b.Int("fence"), s2.Expect(t, "vacant", "b").Int("fence"))
	assert.Equal(t, c.Int("fence"), s2.Expect(t, "elected", "c").Int("fence"))
}

func TestTokensOfOtherKindsAreRefused(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	lock := e.Hold(t, e.Client, "same", "a", 30000)
	sem := e.Client.Do(http.MethodPost, "/semaphores/same", nil, testkit.PermitBody("a", 2, 30000, 0))
	require.Equal(t, http.StatusCreated, sem.Status, "%s", sem.Body)
	el := elect(t, e.Client, "same", "a", "v", 30000)

	for name, token := range map[string]string{"lock": lock.Str("token"), "semaphore": sem.Str("token")} {
		for _, r := range []*harness.Response{proclaim(e.Client, "same", token, "x"), resign(e.Client, "same", token),
			e.Client.Do(http.MethodPost, "/elections/same/renew", testkit.TokenHeader(token), "")} {
			require.Equal(t, http.StatusBadRequest, r.Status, "a %s's token: %s", name, r.Body)
			assert.Equal(t, probInvalidToken, r.Str("type"))
			assert.Contains(t, r.Str("detail"), "a "+name+"'s token, not an election's")
		}
	}
	for _, path := range []string{"/locks/same", "/semaphores/same"} {
		r := e.Client.Do(http.MethodDelete, path, testkit.TokenHeader(el.Str("token")), "")
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", path, r.Body)
		assert.Contains(t, r.Str("detail"), "an election's token", path)
	}
	// A campaign takes no token, and needs a value.
	r := e.Client.Do(http.MethodPost, "/elections/same", testkit.TokenHeader(el.Str("token")), campaignBody("a", "v", 1000, 0, ""))
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, probInvalid, r.Str("type"))
	r = e.Client.Do(http.MethodPost, "/elections/other", nil, `{"owner":"a"}`)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Contains(t, string(r.Body), `"name":"value"`)
	r = e.Client.Do(http.MethodGet, "/elections/same/events", harness.Headers{"Last-Event-ID": "yesterday"}, "")
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, probInvalid, r.Str("type"))
}

func TestCampaignRetriedWithItsIdempotencyKeyIsOneLead(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	h := harness.Headers{"Idempotency-Key": "campaign-1"}
	body := campaignBody("a", "v", 30000, 0, "")
	first := e.Client.Do(http.MethodPost, "/elections/idem", h, body)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	retry := e.Client.Do(http.MethodPost, "/elections/idem", h, body)
	require.Equal(t, http.StatusCreated, retry.Status, "%s", retry.Body)
	assert.Equal(t, first.Int("fence"), retry.Int("fence"), "the same lead")
	assert.Equal(t, first.Str("event_id"), retry.Str("event_id"), "announced once")
	s := observe(t, e.Gateway.URL, "idem", "0-0")
	s.Expect(t, "elected", "a")
	s.NoEventOf(t, 300*time.Millisecond, "elected")
	other := e.Client.Do(http.MethodPost, "/elections/idem", h, campaignBody("a", "another value", 30000, 0, ""))
	assert.Equal(t, http.StatusUnprocessableEntity, other.Status, "%s", other.Body)
}

func TestWaitRunsOutWithATicketAndForceTakesTheLead(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	s := observe(t, e.Gateway.URL, "f", "")
	s.Expect(t, "state", "")
	a := elect(t, e.Client, "f", "a", "v", 60000)
	s.Expect(t, "elected", "a")
	r := campaign(e.Client, "f", "b", "w", 30000, 300)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Equal(t, probElectionLed, r.Str("type"))
	assert.NotEmpty(t, r.Str("queue_ticket"))
	assert.GreaterOrEqual(t, r.Int("waited_ms"), int64(300))

	b := startCampaign(e.Client, "f", "b", "w", 30000, 20000)
	testkit.EventuallyPaced(t, 10*time.Second, "b in line", func() bool { return candidates(t, e.Client, "f") == 1 })
	f := e.Client.Do(http.MethodDelete, "/elections/f?force=true", nil, "")
	require.Equal(t, http.StatusOK, f.Status, "%s", f.Body)
	assert.Equal(t, "f", f.Str("election"))
	assert.Equal(t, int64(1), f.Int("holds_removed"))
	gb := testkit.Receive(t, b, 10*time.Second, "b's campaign")
	require.Equal(t, http.StatusCreated, gb.Status, "%s", gb.Body)
	assert.Equal(t, a.Int("fence"), s.Expect(t, "vacant", "a").Int("fence"))
	assert.Equal(t, gb.Int("fence"), s.Expect(t, "elected", "b").Int("fence"))
	assert.Equal(t, http.StatusGone, proclaim(e.Client, "f", a.Str("token"), "x").Status)
}
