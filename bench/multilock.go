package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

// multiLocks measures multi-locks beside single locks in one run: try-once acquire+release cycles
// of groups of 2 and 8 names against single-lock cycles (rows interleaved round by round), with
// the Redis script calls each costs; then the hand-off from a group's release to single waiters
// on its members.
func multiLocks(redis *harness.Redis) error {
	gw, err := startGateway(redis.Addr, harness.RandomPrefix())
	if err != nil {
		return err
	}
	defer gw.Close()
	type row struct {
		name  string
		size  int
		rates []float64
		calls []float64 // script calls per cycle
		cpu   []float64 // µs of CPU per cycle: this process (clients and gateway) plus redis-server
	}
	rows := []*row{{name: "single lock", size: 1}, {name: "group of 2", size: 2}, {name: "group of 8", size: 8}}
	for round := range *rounds {
		for _, r := range rows {
			redis.Do("CONFIG", "RESETSTAT")
			p0, r0 := processCPU(), redisCPU(redis)
			rate, err := harness.Cycles(*clients, *duration, func(i int) (string, []byte, string) {
				if r.size == 1 {
					name := fmt.Sprintf("%s/locks/r%d-single-%d", gw.URL, round, i)
					return name, []byte(`{"owner":"bench","ttl_ms":30000}`), name
				}
				names := make([]string, r.size)
				for k := range names {
					names[k] = fmt.Sprintf("r%d-g%d-%d-%d", round, r.size, i, k)
				}
				body, _ := json.Marshal(map[string]any{"owner": "bench", "ttl_ms": 30000, "locks": names})
				return gw.URL + "/multilocks", body, gw.URL + "/multilocks"
			})
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			calls, err := redis.ScriptCalls()
			if err != nil {
				return err
			}
			n := rate * duration.Seconds()
			r.cpu = append(r.cpu, 1e6*(processCPU()-p0+redisCPU(redis)-r0)/n)
			r.rates = append(r.rates, rate)
			r.calls = append(r.calls, float64(calls)/(rate*duration.Seconds()))
		}
	}
	fmt.Printf("multi-locks, try-once acquire+release cycles (%d clients, distinct names, %d x %v rounds interleaved, medians):\n", *clients, *rounds, *duration)
	single, singleCPU := median(rows[0].rates), median(rows[0].cpu)
	for _, r := range rows {
		fmt.Printf("  %-12s %6.0f cycles/s (%.2fx the single lock's time per cycle; rounds %s); %4.0f µs CPU per cycle (%.2fx); %.2f script calls per cycle\n",
			r.name, median(r.rates), single/median(r.rates), span(r.rates, func(v float64) float64 { return v }, "%.0f"),
			median(r.cpu), median(r.cpu)/singleCPU, median(r.calls))
	}
	return groupHandoff(redis, *duration)
}

// groupHandoff measures the hand-off from a group's release to single waiters on its members: a
// group of two names takes both (waiting), releases at once and queues again, while one single
// waiter on each member (on the other replica) does the same. For each group release it records
// the time from its response to each member's next 201, when that grant went to a single waiter.
func groupHandoff(redis *harness.Redis, d time.Duration) error {
	prefix := harness.RandomPrefix()
	gws := make([]*gateway, 2)
	for i := range gws {
		g, err := startGateway(redis.Addr, prefix)
		if err != nil {
			return err
		}
		defer g.Close()
		gws[i] = g
	}
	type grantEvent struct {
		lock  string
		at    time.Time
		group bool
	}
	var (
		mu       sync.Mutex
		grants   []grantEvent
		releases [][2]time.Time // the group's releases: request sent, response
		wg       sync.WaitGroup
		errOnce  sync.Once
		runErr   error
		stop     = make(chan struct{})
	)
	fail := func(err error) { errOnce.Do(func() { runErr = err; close(stop) }) }
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	loop := func(acquire, release string, body []byte, onGrant func(time.Time), onRelease func(sent, at time.Time)) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tok, err := harness.Call(client, http.MethodPost, acquire, "", body, http.StatusCreated)
			if err != nil {
				fail(err)
				return
			}
			onGrant(time.Now())
			sent := time.Now()
			if _, err := harness.Call(client, http.MethodDelete, release, tok, nil, http.StatusOK); err != nil {
				fail(err)
				return
			}
			onRelease(sent, time.Now())
		}
	}
	members := []string{"gh-a", "gh-b"}
	groupBody, _ := json.Marshal(map[string]any{"owner": "group", "ttl_ms": 30000, "wait_ms": 60000, "locks": members})
	wg.Add(1)
	go loop(gws[0].URL+"/multilocks", gws[0].URL+"/multilocks", groupBody, func(at time.Time) {
		mu.Lock()
		for _, m := range members {
			grants = append(grants, grantEvent{m, at, true})
		}
		mu.Unlock()
	}, func(sent, at time.Time) {
		mu.Lock()
		releases = append(releases, [2]time.Time{sent, at})
		mu.Unlock()
	})
	for _, m := range members {
		wg.Add(1)
		url := gws[1].URL + "/locks/" + m
		go loop(url, url, []byte(`{"owner":"single","ttl_ms":30000,"wait_ms":60000}`), func(at time.Time) {
			mu.Lock()
			grants = append(grants, grantEvent{m, at, false})
			mu.Unlock()
		}, func(time.Time, time.Time) {})
	}
	time.AfterFunc(d, func() { fail(nil) })
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	// For each group release and member, the member's first grant after the release was sent: when
	// it went to the single waiter, that is a hand-off (its 201 may even beat the release's 200).
	var fromResp, fromSent []time.Duration
	for _, rel := range releases {
		for _, m := range members {
			var next *grantEvent
			for k := range grants {
				g := &grants[k]
				if g.lock == m && g.at.After(rel[0]) && (next == nil || g.at.Before(next.at)) {
					next = g
				}
			}
			if next != nil && !next.group {
				fromSent = append(fromSent, next.at.Sub(rel[0]))
				fromResp = append(fromResp, max(next.at.Sub(rel[1]), 0))
			}
		}
	}
	if len(fromSent) == 0 {
		return fmt.Errorf("no group-to-single hand-offs recorded")
	}
	fmt.Printf("  group of 2 releasing to a single waiter on each member (2 replicas, %v): %d hand-offs; group release response -> single waiter's 201: p50 %s p99 %s; release request -> 201: p50 %s p99 %s\n",
		d, len(fromSent), ms3(pct(fromResp, 50)), ms3(pct(fromResp, 99)), ms3(pct(fromSent, 50)), ms3(pct(fromSent, 99)))
	return nil
}
