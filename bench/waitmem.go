package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

// The waitmem scenario (issue #28): what a waiting request costs the gateway process in memory,
// beside the net/http floor, a bare server whose handler reads the same small JSON body and
// blocks on a channel. Each target is a process of its own; the same client (this process, one
// connection per request) parks -waiters requests on it, on one lock name and on one name each.
// Gateways are built with -tags memdebug (debug_memory.go), which serves a forced-GC reading of
// the Go heap and stacks; the floor serves the same reading.

// redisPIDOf is the bench's redis-server's process ID, for its CPU time.
var redisPIDOf int

// memTarget is one server process the waitmem scenario measures.
type memTarget struct {
	name string
	bin  string            // a gateway binary built with -tags memdebug; "" for the floor
	env  map[string]string // extra environment for the gateway
}

// memReading is one process's memory, in bytes.
type memReading struct {
	rss        float64 // VmRSS
	heap       float64 // live heap objects, after a forced GC
	stacks     float64 // goroutine stacks in use
	goroutines float64
	startStack float64 // the runtime's starting stack size for new goroutines
}

// memRun is one target's readings in one round: idle, and with the requests waiting; and the
// CPU the server and redis-server spent while they waited (+3 s to +15 s), in cores.
type memRun struct {
	idle, wait3, wait15 memReading
	cpu, redisCPU       float64
	inLine              int // waiting requests live in their locks' queues after the readings (-1: not asked)
}

// waitmem measures the floor and each gateway build in alternating rounds.
func waitmem(dir string, redis *harness.Redis) error {
	var err error
	if redisPIDOf, err = redisPID(redis); err != nil {
		return err
	}
	// This process and the server each hold one end of every connection.
	if err := raiseFileLimit(*waiters + 1000); err != nil {
		return err
	}
	targets := []memTarget{{name: "net/http floor"}}
	for _, nr := range strings.Split(*baselineRev, ",") {
		if name, rev, ok := strings.Cut(nr, "="); ok {
			bin, err := buildMemGateway(dir, name, rev)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			targets = append(targets, memTarget{name: name, bin: bin})
		}
	}
	bin, err := buildMemGateway(dir, "this-tree", "")
	if err != nil {
		return err
	}
	targets = append(targets, memTarget{name: "this tree", bin: bin})
	if *memEnv != "" {
		env := map[string]string{}
		for _, kv := range strings.Split(*memEnv, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		targets = append(targets, memTarget{name: "this tree, " + *memEnv, bin: bin, env: env})
	}

	type row struct {
		target memTarget
		locks  int
	}
	var rows []row
	for _, t := range targets {
		if t.bin == "" {
			rows = append(rows, row{t, 0})
			continue
		}
		for _, s := range strings.Split(*memLocks, ",") {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return fmt.Errorf("-waitmem-locks: %q is not a number of lock names", s)
			}
			rows = append(rows, row{t, n})
		}
	}
	runs := make([][]memRun, len(rows))
	for r := range *rounds {
		for i, rw := range rows {
			var m memRun
			var err error
			if rw.target.bin == "" {
				m, err = measureFloor(dir, r == *rounds-1)
			} else {
				m, err = measureGateway(dir, redis, rw.target, rw.locks, r == *rounds-1)
			}
			if err != nil {
				return fmt.Errorf("%s, %d lock names: %w", rw.target.name, rw.locks, err)
			}
			runs[i] = append(runs[i], m)
			fmt.Printf("  round %d: %-40s %-12s RSS %.0f -> %.0f MB, %.1f KB per waiter; heap + stacks %.1f + %.1f KB per waiter; %.2f goroutines per waiter; starting stack %.0f KB; CPU while waiting %.0f %% + redis-server %.0f %%; %d in line\n",
				r+1, rw.target.name, lockNames(rw.locks), m.idle.rss/1e6, m.wait15.rss/1e6, perWaiter(m, func(x memReading) float64 { return x.rss }),
				perWaiter(m, func(x memReading) float64 { return x.heap }), perWaiter(m, func(x memReading) float64 { return x.stacks }),
				(m.wait15.goroutines-m.idle.goroutines)/float64(*waiters), m.wait15.startStack/1024, 100*m.cpu, 100*m.redisCPU, m.inLine)
		}
	}

	fmt.Printf("%d waiting requests, one connection each, from this process; one server process per row and round (%d rounds, ranges over rounds):\n", *waiters, *rounds)
	fmt.Printf("  %-40s | %-12s | %-9s | %-18s | %-16s | %-14s | %-14s | %-10s | %-24s | %s\n", "server", "lock names", "RSS idle", "RSS waiting +3/+15s", "RSS per waiter", "heap per waiter", "stacks per waiter", "goroutines per waiter", "CPU while waiting: server, redis-server", "in line at the end")
	for i, rw := range rows {
		ms := runs[i]
		fmt.Printf("  %-40s | %-12s | %-9s | %-18s | %-16s | %-14s | %-14s | %-10s | %-24s | %s\n", rw.target.name, lockNames(rw.locks),
			span(ms, func(m memRun) float64 { return m.idle.rss / 1e6 }, "%.0f MB"),
			span(ms, func(m memRun) float64 { return m.wait3.rss / 1e6 }, "%.0f")+" / "+span(ms, func(m memRun) float64 { return m.wait15.rss / 1e6 }, "%.0f MB"),
			span(ms, func(m memRun) float64 { return perWaiter(m, func(x memReading) float64 { return x.rss }) }, "%.1f KB"),
			span(ms, func(m memRun) float64 { return perWaiter(m, func(x memReading) float64 { return x.heap }) }, "%.1f KB"),
			span(ms, func(m memRun) float64 { return perWaiter(m, func(x memReading) float64 { return x.stacks }) }, "%.1f KB"),
			span(ms, func(m memRun) float64 { return (m.wait15.goroutines - m.idle.goroutines) / float64(*waiters) }, "%.2f"),
			span(ms, func(m memRun) float64 { return 100 * m.cpu }, "%.0f %%")+", "+span(ms, func(m memRun) float64 { return 100 * m.redisCPU }, "%.0f %%"),
			span(ms, func(m memRun) float64 { return float64(m.inLine) }, "%.0f"))
	}
	fmt.Println("  (RSS per waiter: (RSS 15 s after the last request parked - RSS idle) / waiters, 1 KB = 1,024 B;" +
		" heap and stacks: after a forced GC, following the +15 s reading; in line: live entries in the locks' queues" +
		" (GET /locks/{name}: waiters) after the readings, -1 for the floor)")
	return nil
}

func lockNames(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// perWaiter is what f grew by from idle to +15 s, per waiting request, in KB.
func perWaiter(m memRun, f func(memReading) float64) float64 {
	return (f(m.wait15) - f(m.idle)) / 1024 / float64(*waiters)
}

// raiseFileLimit lifts this process's open file limit (inherited by the servers it starts) to
// its hard limit, and fails when that is below need.
func raiseFileLimit(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(need) {
		return fmt.Errorf("the scenario needs an open file limit of %d (hard limit %d): %v", need, lim.Max, err)
	}
	return nil
}

// buildMemGateway builds the gateway with -tags memdebug: this tree's (rev ""), or that of git
// revision rev, exported into dir with this tree's debug_memory.go added when it lacks one.
func buildMemGateway(dir, name, rev string) (string, error) {
	root, err := harness.ModuleRoot()
	if err != nil {
		return "", err
	}
	src := root
	if rev != "" {
		src = filepath.Join(dir, "src-"+name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return "", err
		}
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
		if out, err := archive.CombinedOutput(); err != nil {
			return "", fmt.Errorf("exporting %s: %v\n%s", rev, err, out)
		}
		if _, err := os.Stat(filepath.Join(src, "debug_memory.go")); errors.Is(err, os.ErrNotExist) {
			b, err := os.ReadFile(filepath.Join(root, "debug_memory.go"))
			if err == nil {
				err = os.WriteFile(filepath.Join(src, "debug_memory.go"), b, 0o644)
			}
			if err != nil {
				return "", err
			}
		}
	}
	bin := filepath.Join(dir, "leasegate-"+name)
	cmd := exec.Command("go", "build", "-tags", "memdebug", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// measureGateway starts gateway build t, holds locks lock names (each named wm-i) and parks
// -waiters requests on them, spread evenly; with profile and -memprofile-dir it saves the
// process's heap and goroutine profiles while they wait.
func measureGateway(dir string, redis *harness.Redis, t memTarget, locks int, profile bool) (memRun, error) {
	debugPort, err := harness.FreePort()
	if err != nil {
		return memRun{}, err
	}
	debugURL := "http://127.0.0.1:" + strconv.Itoa(debugPort)
	env := map[string]string{
		"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_MAX_WAITERS": strconv.Itoa(*waiters + 100),
		"LEASEGATE_MAX_WAIT": "5m", "LEASEGATE_DEBUG_LISTEN": "127.0.0.1:" + strconv.Itoa(debugPort),
		"LEASEGATE_DEBUG_MEMPROFILERATE": strconv.Itoa(*memRate),
	}
	maps.Copy(env, t.env)
	gw, err := harness.StartGateway(dir, harness.GatewayOptions{Redis: redis, Binary: t.bin, Env: env})
	if err != nil {
		return memRun{}, err
	}
	defer gw.Stop()
	if err := holdLocks(gw.URL, locks); err != nil {
		return memRun{}, err
	}
	m, stop, err := measureParked(gw.URL, debugURL, gw.PID(), locks)
	defer stop()
	if err != nil {
		return m, err
	}
	if profile && *memprofDir != "" {
		if err := saveProfiles(debugURL, filepath.Join(*memprofDir, strings.NewReplacer(" ", "-", ",", "", "=", "-", "/", "-").Replace(t.name)+"-"+strconv.Itoa(locks))); err != nil {
			return m, err
		}
	}
	// After the readings (its requests make garbage): how many stand in their locks' queues.
	m.inLine, err = queued(gw.URL, locks)
	return m, err
}

// measureFloor starts the net/http floor (this binary, -serve-floor) and parks -waiters
// requests on it.
func measureFloor(dir string, profile bool) (memRun, error) {
	port, err := harness.FreePort()
	if err != nil {
		return memRun{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return memRun{}, err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(dir, "floor.log"))
	if err != nil {
		return memRun{}, err
	}
	defer logf.Close()
	cmd := exec.Command(self, "-serve-floor", "127.0.0.1:"+strconv.Itoa(port), "-memprofile-rate", strconv.Itoa(*memRate))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return memRun{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return memRun{}, fmt.Errorf("the floor did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a benchmark's start-up poll
	}
	m, stop, err := measureParked(url, url, cmd.Process.Pid, 1)
	defer stop()
	m.inLine = -1
	if err == nil && profile && *memprofDir != "" {
		err = saveProfiles(url, filepath.Join(*memprofDir, "floor"))
	}
	return m, err
}

// saveProfiles writes a server's heap and goroutine profiles to base-heap.pb.gz and
// base-goroutine.pb.gz.
func saveProfiles(debugURL, base string) error {
	for _, p := range []string{"heap", "goroutine"} {
		if err := saveURL(debugURL+"/debug/pprof/"+p, base+"-"+p+".pb.gz"); err != nil {
			return err
		}
	}
	return nil
}

// measureParked reads a server's memory idle, then parks -waiters requests on it (over locks
// names) and reads it 3 s and 15 s after the last one parked, and its heap and stacks after a
// forced GC. stop ends the requests.
func measureParked(url, debugURL string, pid, locks int) (m memRun, stop func(), err error) {
	stop = func() {}
	time.Sleep(time.Second) // let start-up and the holders' requests settle
	if m.idle, err = readMemory(debugURL, pid); err != nil {
		return m, stop, err
	}
	stop, early := parkRequests(url, *waiters, max(locks, 1))
	deadline := time.Now().Add(90 * time.Second)
	for {
		n, err := parkedCount(url)
		if err != nil {
			return m, stop, err
		}
		if n >= *waiters {
			break
		}
		if e := early.Load(); e > 0 {
			return m, stop, fmt.Errorf("%d waiting requests were answered early", e)
		}
		if time.Now().After(deadline) {
			return m, stop, fmt.Errorf("only %d of %d requests parked after 90 s", n, *waiters)
		}
		time.Sleep(200 * time.Millisecond) // a benchmark's progress poll
	}
	start := time.Now()
	time.Sleep(3 * time.Second) // readings at fixed times after the last request parked
	m.wait3.rss = rssBytes(pid)
	cpu0, redis0, t0 := procCPU(pid), procCPU(redisPIDOf), time.Now()
	time.Sleep(time.Until(start.Add(15 * time.Second)))
	rss := rssBytes(pid)
	m.cpu = (procCPU(pid) - cpu0) / time.Since(t0).Seconds()
	m.redisCPU = (procCPU(redisPIDOf) - redis0) / time.Since(t0).Seconds()
	if m.wait15, err = readMemory(debugURL, pid); err != nil {
		return m, stop, err
	}
	m.wait15.rss = rss
	if e := early.Load(); e > 0 {
		return m, stop, fmt.Errorf("%d waiting requests were answered early", e)
	}
	return m, stop, nil
}

// readMemory reads pid's RSS, then its Go heap and stacks after a forced GC (GET /debug/memory).
func readMemory(debugURL string, pid int) (memReading, error) {
	r := memReading{rss: rssBytes(pid)}
	resp, err := http.Get(debugURL + "/debug/memory")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	var v map[string]float64
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return r, fmt.Errorf("/debug/memory: %w", err)
	}
	r.heap, r.stacks, r.goroutines, r.startStack = v["heap_objects"], v["stacks"], v["goroutines"], v["starting_stack"]
	return r, nil
}

func rssBytes(pid int) float64 { return rssMB(pid) * 1024 * 1024 }

// holdLocks takes locks lock names wm-i with a long TTL, 32 requests at a time.
func holdLocks(base string, locks int) error {
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var next atomic.Int64
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= locks {
					errs <- nil
					return
				}
				resp, err := client.Post(fmt.Sprintf("%s/locks/wm-%d", base, i), "application/json", strings.NewReader(`{"owner":"holder","ttl_ms":600000}`))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						err = fmt.Errorf("holding wm-%d: %s", i, resp.Status)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range 32 {
		first = errors.Join(first, <-errs)
	}
	return first
}

// parkRequests sends n waiting acquires spread over locks names wm-i, each on a connection of its
// own, at most 256 being connected and written at once (the listen backlog holds 4,096 on this
// machine). One that fails to connect is sent again. early counts those answered before stop;
// stop ends them all.
func parkRequests(base string, n, locks int) (stop func(), early *atomic.Int64) {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Transport: tr}
	early = &atomic.Int64{}
	sending := make(chan struct{}, 256)
	var wg sync.WaitGroup
	body := `{"owner":"waiting","ttl_ms":30000,"wait_ms":240000}`
	for i := range n {
		wg.Go(func() {
			url := fmt.Sprintf("%s/locks/wm-%d", base, i%locks)
			for ctx.Err() == nil {
				sending <- struct{}{}
				var once sync.Once
				sent := func() { once.Do(func() { <-sending }) }
				trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent() }}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, url, strings.NewReader(body))
				resp, err := client.Do(req)
				sent()
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if ctx.Err() == nil {
						early.Add(1)
					}
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	return func() { cancel(); wg.Wait(); tr.CloseIdleConnections() }, early
}

// parkedCount reads leasegate_parked_requests from a server's /metrics.
func parkedCount(base string) (int, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "leasegate_parked_requests "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, errors.New("/metrics has no leasegate_parked_requests")
}

// queued sums the waiters of lock names wm-0..wm-(locks-1), as GET /locks/{name} reports them.
func queued(base string, locks int) (int, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	var next, total atomic.Int64
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= locks {
					errs <- nil
					return
				}
				resp, err := client.Get(fmt.Sprintf("%s/locks/wm-%d", base, i))
				if err != nil {
					errs <- err
					return
				}
				var st struct {
					Waiters int64 `json:"waiters"`
				}
				err = json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
				total.Add(st.Waiters)
			}
		}()
	}
	var first error
	for range 16 {
		first = errors.Join(first, <-errs)
	}
	return int(total.Load()), first
}

func saveURL(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// serveWaitFloor is the net/http floor (go run ./bench -serve-floor ADDR, started by the waitmem
// scenario): POST /locks/{name} reads the small JSON body and blocks on a channel until its
// client leaves, on an http.Server with the gateway's timeouts; GET /metrics says how many
// wait, GET /debug/memory reads memory as a memdebug gateway does.
func serveWaitFloor(addr string) error {
	runtime.MemProfileRate = cmp.Or(*memRate, runtime.MemProfileRate)
	var parked atomic.Int64
	never := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /locks/{name}", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Owner string `json:"owner"`
			TTL   int64  `json:"ttl_ms"`
			Wait  int64  `json:"wait_ms"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		parked.Add(1)
		defer parked.Add(-1)
		select {
		case <-never:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "leasegate_parked_requests %d\n", parked.Load())
	})
	mux.HandleFunc("GET /debug/memory", func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		samples := []metrics.Sample{
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/heap/stacks:bytes"},
			{Name: "/memory/classes/total:bytes"},
			{Name: "/sched/goroutines:goroutines"},
			{Name: "/gc/stack/starting-size:bytes"},
		}
		metrics.Read(samples)
		v := func(i int) uint64 { return samples[i].Value.Uint64() }
		_ = json.NewEncoder(w).Encode(map[string]uint64{"heap_objects": v(0), "stacks": v(1), "runtime_total": v(2),
			"goroutines": v(3), "starting_stack": v(4)})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 5*time.Minute + 15*time.Second, IdleTimeout: 2 * time.Minute}
	srv.Addr = addr
	return srv.ListenAndServe()
}
