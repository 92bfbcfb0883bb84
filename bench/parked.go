package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/tests/harness"
)

// parked holds locks names, parks waiters long-polls spread over them on a gateway process of
// its own, and reports that process's resident memory and the Redis connections and
// subscriptions it uses, then its Redis load while they wait.
func parked(dir string, redis *harness.Redis, waiters, locks int) error {
	env := map[string]string{"LEASEGATE_LOG_LEVEL": "warn"}
	for _, kv := range strings.Split(*gwEnv, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	gw, err := harness.StartGateway(dir, harness.GatewayOptions{Redis: redis, Env: env})
	if err != nil {
		return err
	}
	defer gw.Stop()
	rss0 := rssMB(gw.PID())
	clients0 := infoField(redis, "clients", "connected_clients")

	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	hold := []byte(`{"owner":"holder","ttl_ms":600000}`)
	for i := 0; i < locks; i++ {
		if _, err := call(client, http.MethodPost, fmt.Sprintf("%s/locks/parked-%d", gw.URL, i), "", hold, http.StatusCreated); err != nil {
			return err
		}
	}

	// One connection per long-poll, as separate clients would have.
	waitTr := &http.Transport{MaxIdleConnsPerHost: waiters, MaxConnsPerHost: 0, DisableKeepAlives: true}
	defer waitTr.CloseIdleConnections()
	waitClient := &http.Client{Transport: waitTr}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	body := `{"owner":"parked","ttl_ms":30000,"wait_ms":60000}`
	start := time.Now()
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/locks/parked-%d", gw.URL, i%locks), strings.NewReader(body))
			if resp, err := waitClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	queued := func() int {
		n := 0
		for i := 0; i < locks; i++ {
			v, _ := redis.Do("ZCARD", fmt.Sprintf("%s{parked-%d}:q", gw.KeyPrefix, i))
			c, _ := strconv.Atoi(v)
			n += c
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for queued() < waiters {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d waiters queued after 60 s", queued(), waiters)
		}
		time.Sleep(200 * time.Millisecond) // a benchmark's progress poll
	}
	parkedIn := time.Since(start)
	redis.Do("CONFIG", "RESETSTAT")
	cpu0 := redisCPU(redis)
	const settle = 3 * time.Second
	time.Sleep(settle) // measure the steady state of parked waiters
	calls, _ := redis.ScriptCalls()
	redisShare := (redisCPU(redis) - cpu0) / settle.Seconds()
	channels, _ := redis.Do("PUBSUB", "NUMPAT")
	subs, _ := redis.Do("PUBSUB", "CHANNELS", gw.KeyPrefix+"*")

	fmt.Printf("parked waiters: %d long-polls over %d lock names on one gateway process (parked in %v):\n", waiters, locks, parkedIn.Round(time.Millisecond))
	fmt.Printf("  gateway RSS: %.0f MB idle, %.0f MB with the waiters parked\n", rss0, rssMB(gw.PID()))
	fmt.Printf("  Redis connections from the gateway: %d (before: %s clients incl. this bench's probes)\n",
		atoiOr(infoField(redis, "clients", "connected_clients"))-atoiOr(clients0)+1, clients0)
	fmt.Printf("  pub/sub channels subscribed: %d, patterns: %s\n", len(strings.Fields(subs)), channels)
	fmt.Printf("  while parked: %.0f script calls/s (one tend per lock name per heartbeat), redis-server %.0f%% of a core\n",
		float64(calls)/settle.Seconds(), 100*redisShare)
	return nil
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

func infoField(r *harness.Redis, section, field string) string {
	info, _ := r.Do("INFO", section)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

func atoiOr(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
