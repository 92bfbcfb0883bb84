package elections

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// leadRecord is one lead a worker was told it had (a 201), and how it ended.
type leadRecord struct {
	owner    string
	fence    int64
	resigned bool
}

// churn runs workers that campaign (waiting), proclaim and resign on c, rounds times each, and
// records every lead they were answered.
func churn(t *testing.T, c *harness.Client, election string, workers, rounds int, mu *sync.Mutex, leads *[]leadRecord) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		owner := "w" + string(rune('a'+w))
		wg.Go(func() {
			for range rounds {
				r := campaign(c, election, owner, owner+":1", 10000, 20000)
				if r.Status != http.StatusCreated {
					t.Errorf("%s's campaign: %d %s", owner, r.Status, r.Body)
					return
				}
				rec := leadRecord{owner: owner, fence: r.Int("fence")}
				if p := proclaim(c, election, r.Str("token"), owner+":2"); p.Status != http.StatusOK {
					t.Errorf("%s's proclaim: %d %s", owner, p.Status, p.Body)
				}
				rs := resign(c, election, r.Str("token"))
				rec.resigned = rs.Status == http.StatusOK
				mu.Lock()
				*leads = append(*leads, rec)
				mu.Unlock()
			}
		})
	}
	return &wg
}

// drain reads s's events until it ends or an event with id until arrives.
func drain(t *testing.T, s *testkit.EventStream, until string, timeout time.Duration) []testkit.SSEEvent {
	t.Helper()
	var out []testkit.SSEEvent
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-s.Events:
			if !ok {
				return out
			}
			out = append(out, ev)
			if until != "" && ev.ID == until {
				return out
			}
		case <-deadline:
			require.FailNow(t, "stream did not reach its end", "until %q; got %d events", until, len(out))
		}
	}
}

func TestObserverResumesAcrossAGatewayKill(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	writer := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	wc := harness.NewClient(t, writer.URL)

	s1 := observe(t, e.Gateway.URL, "kill", "")
	first := s1.Expect(t, "state", "")
	var (
		mu    sync.Mutex
		leads []leadRecord
	)
	wg := churn(t, wc, "kill", 3, 20, &mu, &leads)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(leads) }

	// The observer's gateway dies mid-run.
	var before []testkit.SSEEvent
	for len(before) < 8 {
		before = append(before, s1.Next(t, 10*time.Second))
	}
	require.NoError(t, e.Gateway.Kill())
	before = append(before, drain(t, s1, "", 10*time.Second)...)
	atKill := count()
	testkit.EventuallyPaced(t, 30*time.Second, "more leads while the observer is away", func() bool { return count() >= atKill+5 })

	// It comes back on another gateway, started after the kill, with the last id it got.
	third := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	last := before[len(before)-1].ID
	s2 := observe(t, third.URL, "kill", last)
	wg.Wait()
	end := state(t, wc, "kill").Str("last_event_id")
	after := drain(t, s2, end, 30*time.Second)
	require.NotEmpty(t, after)
	assert.NotEqual(t, "state", after[0].Type, "a resumed stream starts after its last event, not with a state")

	seen := append(before, after...)
	full := drain(t, observe(t, third.URL, "kill", first.ID), end, 30*time.Second)
	require.Equal(t, len(full), len(seen), "the observer saw as many events as the log holds")
	for i := range full {
		assert.Equal(t, full[i].ID, seen[i].ID, "event %d", i)
		assert.Equal(t, full[i].Type, seen[i].Type, "event %d", i)
		assert.Equal(t, full[i].Int("fence"), seen[i].Int("fence"), "event %d", i)
	}
	checkLog(t, full, leads)
}

// checkLog checks what an observer is promised of a log: each lead that was answered 201 is
// elected in it once, leaders' fences strictly increase, a leader's events name its fence, and
// each leader ends (resigned or vacant) before the next is elected.
func checkLog(t *testing.T, events []testkit.SSEEvent, leads []leadRecord) {
	t.Helper()
	elected := map[int64]string{}
	var cur, prev int64
	for _, ev := range events {
		f := ev.Int("fence")
		switch ev.Type {
		case "elected":
			require.Zero(t, cur, "%s elected (fence %d) while %d still leads", ev.Str("owner"), f, cur)
			require.Greater(t, f, prev, "fences of successive leaders increase")
			_, twice := elected[f]
			require.False(t, twice, "fence %d elected twice", f)
			elected[f] = ev.Str("owner")
			cur, prev = f, f
		case "proclaimed":
			require.Equal(t, cur, f, "a proclaim names the leader's fence")
		case "resigned", "vacant":
			require.Equal(t, cur, f, "an end names the leader's fence")
			cur = 0
		default:
			require.Failf(t, "unexpected event", "%s %v", ev.Type, ev.Data)
		}
	}
	for _, l := range leads {
		owner, ok := elected[l.fence]
		require.True(t, ok, "the lead of %s (fence %d) was answered 201 and is in the log", l.owner, l.fence)
		require.Equal(t, l.owner, owner)
	}
}

// TestAResumedStreamWithNothingNewAnswersAtOnce: a stream resumed with the id of the latest event
// has nothing to send, yet its 200 and headers reach the client at once (they once waited for
// the first event or the 15 s keep-alive, so a client could not tell it was connected).
func TestAResumedStreamWithNothingNewAnswersAtOnce(t *testing.T) {
	t.Parallel()
	e := testkit.NewEnv(t, nil)
	g := elect(t, e.Client, "quiet", "a", "v", 60000)
	start := time.Now()
	s := observe(t, e.Gateway.URL, "quiet", g.Str("event_id"))
	assert.Equal(t, "text/event-stream", s.Header.Get("Content-Type"))
	assert.Less(t, time.Since(start), 5*time.Second, "the headers came before any event")
}
