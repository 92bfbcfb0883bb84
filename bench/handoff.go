package main

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/leasegate/leasegate/tests/harness"
)

// handoff measures contended hand-offs on one lock through two gateway replicas: n waiters stay
// queued while the holder of the moment releases and queues again. For each hand-off it records
// the time from the release's response (and from its request) to the next holder's 201.
func handoff(redis *harness.Redis, n int, d time.Duration) error {
	gws := make([]*gateway, 2)
	prefix := harness.RandomPrefix() // replicas share the key prefix
	for i := range gws {
		g, err := startGateway(redis.Addr, prefix)
		if err != nil {
			return err
		}
		defer g.Close()
		gws[i] = g
	}
	lock := fmt.Sprintf("%s/locks/handoff-%d", "%s", n)

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

	tr := &http.Transport{MaxIdleConnsPerHost: n + 2}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	body := []byte(`{"owner":"bench","ttl_ms":30000,"wait_ms":60000}`)
	redis.Do("CONFIG", "RESETSTAT")
	cpu0 := redisCPU(redis)
	start := time.Now()
	for i := 0; i <= n; i++ { // n waiters plus the holder of the moment
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf(lock, gws[i%2].URL)
			for {
				select {
				case <-stop:
					return
				default:
				}
				tok, err := call(client, http.MethodPost, url, "", body, http.StatusCreated)
				if err != nil {
					fail(err)
					return
				}
				record(handoffEvent{kind: granted, at: time.Now()})
				sent := time.Now()
				if _, err := call(client, http.MethodDelete, url, tok, nil, http.StatusOK); err != nil {
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
		return firstErr
	}
	calls, err := redis.ScriptCalls()
	if err != nil {
		return err
	}
	redisShare := (redisCPU(redis) - cpu0) / elapsed.Seconds()

	// Pair each release with the next grant; grants and releases alternate in time because only
	// one participant holds the lock at a time.
	sort.Slice(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	var fromResp, fromSent []time.Duration
	handoffs := 0
	for i, ev := range events {
		if ev.kind != released {
			continue
		}
		for j := i + 1; j < len(events); j++ {
			if events[j].kind == granted {
				fromResp = append(fromResp, max(events[j].at.Sub(ev.at), 0))
				fromSent = append(fromSent, events[j].at.Sub(ev.sent))
				handoffs++
				break
			}
		}
	}
	if handoffs == 0 {
		return fmt.Errorf("no hand-offs recorded")
	}
	fmt.Printf("  %3d waiters: %6d hand-offs, %6.0f hand-offs/s, release response -> 201: p50 %s p99 %s; release request -> 201: p50 %s p99 %s; %.2f script calls per cycle (queue + release + confirm); redis-server %.0f%% of a core\n",
		n, handoffs, float64(handoffs)/elapsed.Seconds(),
		ms3(pct(fromResp, 50)), ms3(pct(fromResp, 99)), ms3(pct(fromSent, 50)), ms3(pct(fromSent, 99)),
		float64(calls)/float64(handoffs), 100*redisShare)
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
