package main

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

// participant is one client of a contention run: where it acquires and with what body.
type participant struct {
	path string // e.g. /locks/x or /semaphores/x
	body []byte
}

// contention is what a contention run recorded.
type contention struct {
	events      []handoffEvent
	elapsed     time.Duration
	scriptCalls int64
	redisShare  float64 // redis-server's CPU over the run, in cores
}

// contend runs the participants through two gateway replicas (participant i on replica i%2) for
// d: each waits for its grant, releases at once and queues again.
func contend(redis *harness.Redis, ps []participant, d time.Duration) (contention, error) {
	gws := make([]*gateway, 2)
	prefix := harness.RandomPrefix() // replicas share the key prefix
	for i := range gws {
		g, err := startGateway(redis.Addr, prefix)
		if err != nil {
			return contention{}, err
		}
		defer g.Close()
		gws[i] = g
	}
	var (
		mu       sync.Mutex
		events   []handoffEvent
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; close(stop) }) }
	record := func(ev handoffEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}

	tr := &http.Transport{MaxIdleConnsPerHost: len(ps) + 2}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	redis.Do("CONFIG", "RESETSTAT")
	cpu0 := redisCPU(redis)
	start := time.Now()
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := gws[i%2].URL + p.path
			for {
				select {
				case <-stop:
					return
				default:
				}
				tok, err := harness.Call(client, http.MethodPost, url, "", p.body, http.StatusCreated)
				if err != nil {
					fail(err)
					return
				}
				record(handoffEvent{kind: granted, at: time.Now()})
				sent := time.Now()
				if _, err := harness.Call(client, http.MethodDelete, url, tok, nil, http.StatusOK); err != nil {
					fail(err)
					return
				}
				record(handoffEvent{kind: released, at: time.Now(), sent: sent})
				if time.Since(start) > d {
					fail(nil)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return contention{}, firstErr
	}
	calls, err := redis.ScriptCalls()
	if err != nil {
		return contention{}, err
	}
	sort.Slice(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	return contention{events: events, elapsed: elapsed, scriptCalls: calls,
		redisShare: (redisCPU(redis) - cpu0) / elapsed.Seconds()}, nil
}

// grants counts the run's grants.
func (c contention) grants() int {
	n := 0
	for _, ev := range c.events {
		if ev.kind == granted {
			n++
		}
	}
	return n
}

// handoffs pairs every grant that directly follows a release with that release: the time from
// the release's response (and from its request) to the 201. Grants that follow another grant (the
// rest of a batch of shared grants) are not hand-offs of their own.
func (c contention) handoffs() (fromResp, fromSent []time.Duration) {
	for i := 1; i < len(c.events); i++ {
		prev, ev := c.events[i-1], c.events[i]
		if ev.kind == granted && prev.kind == released {
			fromResp = append(fromResp, max(ev.at.Sub(prev.at), 0))
			fromSent = append(fromSent, ev.at.Sub(prev.sent))
		}
	}
	return fromResp, fromSent
}

// handoff measures contended hand-offs on one lock through two gateway replicas: n waiters stay
// queued while the holder of the moment releases and queues again. For each hand-off it records
// the time from the release's response (and from its request) to the next holder's 201.
func handoff(redis *harness.Redis, n int, d time.Duration) error {
	ps := make([]participant, n+1) // n waiters plus the holder of the moment
	for i := range ps {
		ps[i] = participant{fmt.Sprintf("/locks/handoff-%d", n), []byte(`{"owner":"bench","ttl_ms":30000,"wait_ms":60000}`)}
	}
	c, err := contend(redis, ps, d)
	if err != nil {
		return err
	}
	fromResp, fromSent := c.handoffs()
	if len(fromResp) == 0 {
		return fmt.Errorf("no hand-offs recorded")
	}
	fmt.Printf("  %3d waiters: %6d hand-offs, %6.0f hand-offs/s, release response -> 201: p50 %s p99 %s; release request -> 201: p50 %s p99 %s; %.2f script calls per cycle (queue + release + confirm); redis-server %.0f%% of a core\n",
		n, len(fromResp), float64(len(fromResp))/c.elapsed.Seconds(),
		ms3(pct(fromResp, 50)), ms3(pct(fromResp, 99)), ms3(pct(fromSent, 50)), ms3(pct(fromSent, 99)),
		float64(c.scriptCalls)/float64(c.grants()), 100*c.redisShare)
	return nil
}

// readWrite measures a lock with 100 waiters, each group of 10 shared ones followed by an
// exclusive one, every holder releasing at once and queueing again.
func readWrite(redis *harness.Redis, d time.Duration) error {
	ps := make([]participant, 100)
	for i := range ps {
		body := `{"owner":"reader","ttl_ms":30000,"wait_ms":60000,"mode":"shared"}`
		if i%11 == 10 {
			body = `{"owner":"writer","ttl_ms":30000,"wait_ms":60000}`
		}
		ps[i] = participant{"/locks/read-write", []byte(body)}
	}
	c, err := contend(redis, ps, d)
	if err != nil {
		return err
	}
	fromResp, fromSent := c.handoffs()
	if len(fromResp) == 0 {
		return fmt.Errorf("no hand-offs recorded")
	}
	fmt.Printf("  read-write lock, 100 waiters (10 shared, 1 exclusive, ...): %6d grants, %6.0f grants/s, %6.0f hand-offs/s, release response -> next 201: p50 %s p99 %s; release request -> 201: p50 %s p99 %s; %.2f script calls per grant; redis-server %.0f%% of a core\n",
		c.grants(), float64(c.grants())/c.elapsed.Seconds(), float64(len(fromResp))/c.elapsed.Seconds(),
		ms3(pct(fromResp, 50)), ms3(pct(fromResp, 99)), ms3(pct(fromSent, 50)), ms3(pct(fromSent, 99)),
		float64(c.scriptCalls)/float64(c.grants()), 100*c.redisShare)
	return nil
}

// semaphore measures a semaphore of 10 permits with 100 waiters, every holder releasing at once
// and queueing again.
func semaphore(redis *harness.Redis, d time.Duration) error {
	ps := make([]participant, 100)
	for i := range ps {
		ps[i] = participant{"/semaphores/pool", []byte(`{"owner":"bench","permits":10,"ttl_ms":30000,"wait_ms":60000}`)}
	}
	c, err := contend(redis, ps, d)
	if err != nil {
		return err
	}
	fromResp, _ := c.handoffs()
	if len(fromResp) == 0 {
		return fmt.Errorf("no hand-offs recorded")
	}
	fmt.Printf("  semaphore of 10, 100 waiters: %6d grants, %6.0f grants/s, release response -> next 201: p50 %s p99 %s; %.2f script calls per grant; redis-server %.0f%% of a core\n",
		c.grants(), float64(c.grants())/c.elapsed.Seconds(), ms3(pct(fromResp, 50)), ms3(pct(fromResp, 99)),
		float64(c.scriptCalls)/float64(c.grants()), 100*c.redisShare)
	return nil
}

type handoffKind int

const (
	granted handoffKind = iota
	released
)

type handoffEvent struct {
	kind handoffKind
	at   time.Time // when the 201 or the release's 200 was read
	sent time.Time // releases: when the DELETE was sent
}

func pct(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms3(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }
