package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

// build is one gateway executable the waiting scenario measures.
type build struct {
	name string
	bin  string            // "" = this tree's, built by the harness
	env  map[string]string // extra environment
}

// waiting measures this tree's gateway and, with -baseline, another build side by side, in
// alternating rounds: the memory of -waiters long-polls waiting at once, and (with -lgbench) hand-offs
// on one contended lock and a crowd of waiters on one lock, measured from outside by lgbench.
func waiting(dir string, redis *harness.Redis) error {
	builds := baselineBuilds()
	// Thousands of connections, in this process, the gateways and lgbench (which inherit it).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(*waiters+1000) {
		return fmt.Errorf("the scenario needs an open file limit above %d (hard limit %d): %v", *waiters+1000, lim.Max, err)
	}

	memBuilds := builds
	if *gwEnv != "" {
		env := map[string]string{}
		for _, kv := range strings.Split(*gwEnv, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		memBuilds = append(slices.Clip(builds), build{name: "this tree, " + *gwEnv, env: env})
	}
	mem := map[string][]waitingMemory{}
	for range *rounds {
		for _, b := range memBuilds {
			m, err := measureWaitingMemory(dir, redis, b)
			if err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			mem[b.name] = append(mem[b.name], m)
		}
	}
	fmt.Printf("%d waiting long-polls over %d lock names, one gateway process each, one connection per long-poll (%d rounds, ranges over rounds):\n",
		*waiters, *waitLocks, *rounds)
	fmt.Printf("  %-12s | %-10s | %-22s | %-22s | %-26s | %s\n", "build", "RSS idle", "RSS waiting +3s / +15s", "per waiter (RSS, +15s)", "live heap+stacks idle / waiting", "per waiter (live)")
	for _, b := range memBuilds {
		ms := mem[b.name]
		fmt.Printf("  %-12s | %-10s | %-22s | %-22s | %-26s | %s\n", b.name,
			span(ms, func(m waitingMemory) float64 { return m.rssIdle }, "%.0f MB"),
			span(ms, func(m waitingMemory) float64 { return m.rss3 }, "%.0f")+" / "+span(ms, func(m waitingMemory) float64 { return m.rss15 }, "%.0f MB"),
			span(ms, func(m waitingMemory) float64 { return (m.rss15 - m.rssIdle) * 1024 / float64(*waiters) }, "%.1f KB"),
			span(ms, func(m waitingMemory) float64 { return m.liveIdle }, "%.0f")+" / "+span(ms, func(m waitingMemory) float64 { return m.live }, "%.0f MB"),
			span(ms, func(m waitingMemory) float64 { return (m.live - m.liveIdle) * 1024 / float64(*waiters) }, "%.1f KB"))
	}

	if *lgbench == "" {
		fmt.Println("  (hand-off and crowd figures need -lgbench: build ../shared/lgbench)")
		return nil
	}
	for _, w := range []int{10, 100} {
		fmt.Printf("hand-off on one lock, %d waiters, one gateway process, measured by lgbench handoff -w %d -n 600 (%d rounds):\n", w, w, *rounds)
		out := map[string][]map[string]float64{}
		for range *rounds {
			for _, b := range builds {
				r, err := runLgbench(dir, redis, b, "handoff", "-w", strconv.Itoa(w), "-n", "600")
				if err != nil {
					return fmt.Errorf("%s: %w", b.name, err)
				}
				out[b.name] = append(out[b.name], r)
			}
		}
		for _, b := range builds {
			rs := out[b.name]
			key := func(k string) func(map[string]float64) float64 {
				return func(r map[string]float64) float64 { return r[k] }
			}
			fmt.Printf("  %-12s hand-offs/s %s, release response -> next 201 p50 %s, p99 %s\n", b.name,
				span(rs, key("per_s"), "%.0f"), span(rs, key("p50_ms"), "%.3f ms"), span(rs, key("p99_ms"), "%.3f ms"))
		}
	}
	fmt.Printf("crowd: %d long-polls on one lock for 4 s, then released (lgbench crowd):\n", *waiters)
	for _, b := range builds {
		r, err := runLgbench(dir, redis, b, "crowd", "-n", strconv.Itoa(*waiters), "-hold", "4s")
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		fmt.Printf("  %-12s still in line after 4 s: %.0f of %d (max seen %.0f); first %.0f grants, %.0f out of arrival order\n",
			b.name, r["waiters_final"], *waiters, r["waiters_max"], r["grants"], r["wave_inversions"])
	}
	return nil
}

// waitingMemory is one round's memory readings of a gateway process, in MB.
type waitingMemory struct {
	rssIdle, rss3, rss15 float64
	liveIdle, live       float64 // live heap after the last GC + goroutine stacks (GODEBUG=gctrace=1)
}

func measureWaitingMemory(dir string, redis *harness.Redis, b build) (waitingMemory, error) {
	env := map[string]string{"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_MAX_WAITERS": strconv.Itoa(*waiters + 100), "GODEBUG": "gctrace=1"}
	maps.Copy(env, b.env)
	gw, err := harness.StartGateway(dir, harness.GatewayOptions{Redis: redis, Binary: b.bin, Env: env})
	if err != nil {
		return waitingMemory{}, err
	}
	defer gw.Stop()
	var m waitingMemory
	m.rssIdle = rssMB(gw.PID())
	m.liveIdle = lastGC(gw.Logs())

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	for i := range *waitLocks {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/locks/waiting-%d", gw.URL, i), strings.NewReader(`{"owner":"holder","ttl_ms":600000}`))
		resp, err := client.Do(req)
		if err != nil {
			return m, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return m, fmt.Errorf("holding waiting-%d: %s", i, resp.Status)
		}
	}
	waitTr := &http.Transport{DisableKeepAlives: true}
	defer waitTr.CloseIdleConnections()
	stop := longPolls(&http.Client{Transport: waitTr}, gw.URL, *waiters, *waitLocks)
	defer stop()
	queued := func() int {
		n := 0
		for i := range *waitLocks {
			v, _ := redis.Do("ZCARD", fmt.Sprintf("%s{waiting-%d}:q", gw.KeyPrefix, i))
			c, _ := strconv.Atoi(v)
			n += c
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for queued() < *waiters {
		if time.Now().After(deadline) {
			return m, fmt.Errorf("only %d of %d long-polls queued after 60 s", queued(), *waiters)
		}
		time.Sleep(200 * time.Millisecond) // a benchmark's progress poll
	}
	start := time.Now()
	time.Sleep(3 * time.Second) // readings of the steady state, at fixed times
	m.rss3 = rssMB(gw.PID())
	time.Sleep(time.Until(start.Add(15 * time.Second)))
	m.rss15 = rssMB(gw.PID())
	m.live = lastGC(gw.Logs())
	return m, nil
}

// gcLine matches a GODEBUG=gctrace=1 line's heap sizes ("a->b->c MB", c = live after marking) and
// goroutine stacks ("n MB stacks").
var gcLine = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB, \d+ MB goal, (\d+) MB stacks`)

// lastGC returns live heap + stacks in MB after the last GC a gateway's log shows.
func lastGC(logs string) float64 {
	all := gcLine.FindAllStringSubmatch(logs, -1)
	if len(all) == 0 {
		return 0
	}
	last := all[len(all)-1]
	live, _ := strconv.ParseFloat(last[3], 64)
	stacks, _ := strconv.ParseFloat(last[4], 64)
	return live + stacks
}

// longPolls starts n long-polls spread over locks names, each on a connection of its own; one
// that fails to connect (a full accept backlog) is sent again. The returned func ends them all.
func longPolls(client *http.Client, base string, n, locks int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	body := `{"owner":"waiting","ttl_ms":30000,"wait_ms":60000}`
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("%s/locks/waiting-%d", base, i%locks)
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// runLgbench runs one lgbench mode against a fresh gateway process of build b and returns the
// key=value figures of its last output line.
func runLgbench(dir string, redis *harness.Redis, b build, mode string, args ...string) (map[string]float64, error) {
	gw, err := harness.StartGateway(dir, harness.GatewayOptions{Redis: redis, Binary: b.bin, Env: map[string]string{
		"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_MAX_WAITERS": strconv.Itoa(*waiters + 100),
	}})
	if err != nil {
		return nil, err
	}
	defer gw.Stop()
	return runLgbenchAt(gw.URL, mode, args...)
}

// span renders the range of f over rs with format ("a-b", or one figure when they agree).
func span[T any](rs []T, f func(T) float64, format string) string {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if fmt.Sprintf(format, lo) == fmt.Sprintf(format, hi) {
		return fmt.Sprintf(format, lo)
	}
	unit := ""
	if i := strings.LastIndex(format, " "); i >= 0 {
		unit = format[i:]
	}
	return fmt.Sprintf(strings.TrimSuffix(format, unit), lo) + "-" + fmt.Sprintf(format, hi)
}

// rssMB reads a process's resident set size from /proc.
func rssMB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}
