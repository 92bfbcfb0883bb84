package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
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
	start := time.Now()
	stopParking := park(waitClient, gw.URL, waiters, locks)
	defer stopParking()

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
	peak := hwmMB(gw.PID())
	redis.Do("CONFIG", "RESETSTAT")
	cpu0 := redisCPU(redis)
	const settle = 3 * time.Second
	time.Sleep(settle) // measure the steady state of parked waiters
	calls, _ := redis.ScriptCalls()
	redisShare := (redisCPU(redis) - cpu0) / settle.Seconds()
	channels, _ := redis.Do("PUBSUB", "NUMPAT")
	subs, _ := redis.Do("PUBSUB", "CHANNELS", gw.KeyPrefix+"*")
	gwRSS := rssMB(gw.PID())
	var later []string
	for _, at := range []time.Duration{15 * time.Second, 30 * time.Second, 45 * time.Second} {
		time.Sleep(time.Until(start.Add(parkedIn + at)))
		later = append(later, fmt.Sprintf("%.0f MB at +%v", rssMB(gw.PID()), at))
	}

	floor, err := parkedFloor(waiters, locks)
	if err != nil {
		return fmt.Errorf("parked floor: %w", err)
	}
	fmt.Printf("parked waiters: %d long-polls over %d lock names on one gateway process (all connected and queued in %v):\n", waiters, locks, parkedIn.Round(time.Millisecond))
	fmt.Printf("  gateway RSS: %.0f MB idle; peak %.0f MB while they connected; parked: %.0f MB at +%v, %s\n",
		rss0, peak, gwRSS, settle, strings.Join(later, ", "))
	fmt.Printf("  HTTP floor RSS (same router and parking, own process, no Redis): peak %.0f MB; parked: %.0f MB at +3s\n",
		floor.peak, floor.early)
	fmt.Printf("  Redis connections from the gateway: %d (before: %s clients incl. this bench's probes)\n",
		atoiOr(infoField(redis, "clients", "connected_clients"))-atoiOr(clients0)+1, clients0)
	fmt.Printf("  pub/sub channels subscribed: %d, patterns: %s\n", len(strings.Fields(subs)), channels)
	fmt.Printf("  while parked: %.0f script calls/s (one tend per lock name per heartbeat), redis-server %.0f%% of a core\n",
		float64(calls)/settle.Seconds(), 100*redisShare)
	return nil
}

// hwmMB reads a process's peak resident set size from /proc.
func hwmMB(pid int) float64 { return statusMB(pid, "VmHWM:") }

// rssMB reads a process's resident set size from /proc.
func rssMB(pid int) float64 { return statusMB(pid, "VmRSS:") }

func statusMB(pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
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

// floorRSS is the HTTP floor's resident memory: its peak, and a reading once parked. The floor
// allocates nothing while its waits block, so its memory does not change after that.
type floorRSS struct{ peak, early float64 }

// parkedFloor parks the same long-polls on the HTTP floor (this program re-run with -serve-floor)
// and returns its resident memory, read as the gateway's is.
func parkedFloor(waiters, locks int) (floorRSS, error) {
	port, err := harness.FreePort()
	if err != nil {
		return floorRSS{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(os.Args[0], "-serve-floor", addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return floorRSS{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return floorRSS{}, fmt.Errorf("floor server did not start")
		}
		time.Sleep(20 * time.Millisecond) // a benchmark's start-up poll
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	stopParking := park(&http.Client{Transport: tr}, base, waiters, locks)
	defer stopParking()
	deadline = time.Now().Add(60 * time.Second)
	for parkedCount(base) < waiters {
		if time.Now().After(deadline) {
			return floorRSS{}, fmt.Errorf("only %d of %d floor waiters parked", parkedCount(base), waiters)
		}
		time.Sleep(200 * time.Millisecond) // a benchmark's progress poll
	}
	pid := cmd.Process.Pid
	out := floorRSS{peak: hwmMB(pid)}
	time.Sleep(3 * time.Second) // the same readings as the gateway's
	out.early = rssMB(pid)
	return out, nil
}

// parkedCount asks the floor server how many waits it holds (its GET /locks/{name} reports them).
func parkedCount(base string) int {
	resp, err := http.Get(base + "/locks/count")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		Waiters int `json:"waiters"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st.Waiters
}

// park starts waiters long-polls spread over locks names, each on a connection of its own; a
// request that fails to connect (a full accept backlog) is sent again. The returned func ends
// them all and waits for them.
func park(client *http.Client, base string, waiters, locks int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	body := `{"owner":"parked","ttl_ms":30000,"wait_ms":60000}`
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("%s/locks/parked-%d", base, i%locks)
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
