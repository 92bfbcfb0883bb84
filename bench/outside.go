package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/leasegate/leasegate/internal/harness"
)

// target is one server lgbench measures in the outside scenario.
type target struct {
	name string
	url  string
	pid  int // for its CPU time
}

// outside measures this tree's gateway process (and -baseline builds) the way a client sees it,
// beside lgbench's own floors, in alternating rounds: uncontended cycles (lgbench cycles) with the
// server's and redis-server's CPU per cycle, then hand-offs with 1 and 100 waiters (lgbench
// handoff). The HTTP floor is lgbench's bare chi server with the same JSON bodies; the round-trip
// floor is the same server making one trivial script call (return 1) per request. Gateways run
// with their default configuration (access log on), as users run them.
func outside(dir string, redis *harness.Redis) error {
	if *lgbench == "" {
		return fmt.Errorf("the outside scenario needs -lgbench (build ../shared/lgbench)")
	}
	var targets []target
	for _, floor := range []struct{ name, redis string }{{"HTTP floor", ""}, {"round-trip floor", redis.Addr}} {
		t, stop, err := startFloor(floor.name, floor.redis)
		if err != nil {
			return err
		}
		defer stop()
		targets = append(targets, t)
	}
	builds := baselineBuilds()
	for _, b := range builds {
		gw, err := harness.StartGateway(dir, harness.GatewayOptions{Redis: redis, Binary: b.bin})
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		defer gw.Stop()
		targets = append(targets, target{name: b.name, url: gw.URL, pid: gw.PID()})
	}
	redisPID, err := redisPID(redis)
	if err != nil {
		return err
	}

	secs := fmt.Sprintf("%gs", duration.Seconds())
	fmt.Printf("uncontended cycles from outside: lgbench cycles -c %d -d %s, %d rounds alternating; per round cycles/s, CPU µs per cycle (server + redis-server), and the ratio to that round's round-trip floor:\n",
		*clients, secs, *rounds)
	fmt.Println("  (each round runs the servers in another order: on a shared machine the load drifts within a round)")
	rates := map[string][]float64{}
	ratios := map[string][]float64{}
	cpu := map[string][]float64{}
	serverCPU := map[string][]float64{} // the server process's alone, per round
	cpuRatios := map[string][]float64{} // the server's CPU per cycle over the round-trip floor's
	for i := range *rounds {
		line := fmt.Sprintf("  round %d:", i+1)
		for _, t := range rotated(targets, i) {
			p0, r0 := procCPU(t.pid), procCPU(redisPID)
			r, err := runLgbenchAt(t.url, "cycles", "-c", strconv.Itoa(*clients), "-d", secs)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			n := r["cycles"]
			perCycle := func(before, after float64) float64 { return (after - before) * 1e6 / max(n, 1) }
			server, red := perCycle(p0, procCPU(t.pid)), perCycle(r0, procCPU(redisPID))
			rates[t.name] = append(rates[t.name], r["cycles_per_s"])
			cpu[t.name] = append(cpu[t.name], server+red)
			serverCPU[t.name] = append(serverCPU[t.name], server)
			line += fmt.Sprintf(" | %s %.0f (%.0f+%.0f µs)", t.name, r["cycles_per_s"], server, red)
		}
		trip := rates["round-trip floor"][i]
		for _, t := range targets[2:] {
			ratios[t.name] = append(ratios[t.name], rates[t.name][i]/trip)
			cpuRatios[t.name] = append(cpuRatios[t.name], serverCPU[t.name][i]/serverCPU["round-trip floor"][i])
		}
		fmt.Println(line)
	}
	for _, t := range targets {
		fmt.Printf("  %-18s cycles/s %s (median %.0f), CPU per cycle %s (the server's own %s)", t.name, span(rates[t.name], id, "%.0f"),
			median(rates[t.name]), span(cpu[t.name], id, "%.0f µs"), span(serverCPU[t.name], id, "%.0f µs"))
		if rs := ratios[t.name]; rs != nil {
			fmt.Printf(", of the round-trip floor's cycles %s (median %.2f), of its server's CPU %s (median %.2fx)",
				span(rs, id, "%.2f"), median(rs), span(cpuRatios[t.name], id, "%.2fx"), median(cpuRatios[t.name]))
		}
		fmt.Println()
	}

	for _, w := range []int{1, 100} {
		fmt.Printf("hand-off from outside, %d waiter(s): lgbench handoff -w %d -n 600, %d rounds (release response -> next 201):\n", w, w, *rounds)
		// With one waiter nobody waits: each hand-off is a release and the next acquire, one after
		// the other, which the round-trip floor answers too (at its cost of two trivial requests).
		measured := targets[2:]
		if w == 1 {
			measured = targets[1:]
		}
		out := map[string][]map[string]float64{}
		for i := range *rounds {
			for _, t := range rotated(measured, i) {
				r, err := runLgbenchAt(t.url, "handoff", "-w", strconv.Itoa(w), "-n", "600")
				if err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				out[t.name] = append(out[t.name], r)
			}
		}
		for _, t := range measured {
			rs := out[t.name]
			key := func(k string) func(map[string]float64) float64 {
				return func(r map[string]float64) float64 { return r[k] }
			}
			rate := span(rs, key("per_s"), "%.0f") // the floor's grants wait for nothing: no rate
			if t.pid == targets[1].pid {
				rate = "-"
			}
			fmt.Printf("  %-16s hand-offs/s %s, p50 %s, p99 %s\n", t.name,
				rate, span(rs, key("p50_ms"), "%.3f ms"), span(rs, key("p99_ms"), "%.3f ms"))
		}
	}
	return nil
}

func id(v float64) float64 { return v }

// rotated returns ts starting at its (round mod len)-th element, so that no target always runs
// first (or last) in a round.
func rotated[T any](ts []T, round int) []T {
	k := round % len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

// baselineBuilds returns the -baseline builds followed by this tree's.
func baselineBuilds() []build {
	var builds []build
	for _, nb := range strings.Split(*baseline, ",") {
		if name, bin, ok := strings.Cut(nb, "="); ok {
			builds = append(builds, build{name: name, bin: bin})
		}
	}
	return append(builds, build{name: "this tree"})
}

// startFloor starts an lgbench floor server (with redisAddr: the round-trip floor) on a loopback
// port.
func startFloor(name, redisAddr string) (target, func(), error) {
	args := []string{"floor", "-addr", "127.0.0.1:0"}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	cmd := exec.Command(*lgbench, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return target{}, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return target{}, nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	addr, err := bufio.NewReader(stdout).ReadString('\n') // the floor prints its address first
	if err != nil {
		stop()
		return target{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	return target{name: name, url: "http://" + strings.TrimSpace(addr), pid: cmd.Process.Pid}, stop, nil
}

// runLgbenchAt runs one lgbench mode against url and returns the key=value figures of its last
// output line.
func runLgbenchAt(url, mode string, args ...string) (map[string]float64, error) {
	cmd := exec.Command(*lgbench, append([]string{mode, "-url", url}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("lgbench %s: %w\n%s", mode, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	figures := map[string]float64{}
	for _, word := range strings.Fields(lines[len(lines)-1]) {
		if k, v, ok := strings.Cut(word, "="); ok {
			figures[k], _ = strconv.ParseFloat(v, 64)
		}
	}
	return figures, nil
}

// procCPU is a process's user+system CPU time in seconds, from /proc (0 when unreadable).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / 100 // clock ticks: USER_HZ is 100 on Linux
}

// redisPID asks redis-server for its process ID.
func redisPID(r *harness.Redis) (int, error) {
	info, err := r.Do("INFO", "server")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("redis-server did not report its process_id")
}
