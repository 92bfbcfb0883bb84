package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasegate/leasegate/internal/harness"
	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// BenchmarkSDKPath measures the path SDK users take beside the bare one, on one Redis and on a
// Redis Cluster, in alternating rounds on one machine: uncontended acquire+release cycles on
// distinct names from sdkWorkers clients, without an Idempotency-Key ("keyless"), with a fresh
// key on each call as every SDK sends ("keyed"), and through the Go SDK's Lock and Release
// ("go sdk"); for each, cycles/s, the gateway's and Redis's CPU per cycle (/proc), and the ratio
// to the keyless cycle of the same round. -sdkpath.baseline name=binary adds another gateway
// build, measured in the same rounds:
//
//	go test ./bench -run '^$' -bench SDKPath -benchtime 1x -sdkpath.rounds 4 -sdkpath.duration 3s [-sdkpath.baseline base=/tmp/gw-old]
var (
	sdkRounds   = flag.Int("sdkpath.rounds", 3, "rounds per deployment")
	sdkDuration = flag.Duration("sdkpath.duration", 2*time.Second, "length of one mode's run in a round")
	sdkWorkers  = flag.Int("sdkpath.workers", 32, "concurrent clients")
	sdkBaseline = flag.String("sdkpath.baseline", "", "other gateway builds, name=binary[,name=binary]")
	sdkDeploy   = flag.String("sdkpath.deployments", "one,cluster", "deployments to measure: one (one Redis), cluster")
)

func BenchmarkSDKPath(b *testing.B) {
	for _, deploy := range strings.Split(*sdkDeploy, ",") {
		b.Run(deploy, func(b *testing.B) {
			for range b.N {
				sdkPath(b, deploy)
			}
		})
	}
}

// sdkTarget is one gateway measured, and the Redis processes it uses (for their CPU).
type sdkTarget struct {
	name string
	url  string
	pid  int
}

func sdkPath(b *testing.B, deploy string) {
	dir := b.TempDir()
	var opts harness.GatewayOptions
	var redisPIDs []int
	switch deploy {
	case "one":
		r, err := harness.StartRedis(dir, harness.RedisOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.Stop() })
		opts.Redis = r
		pid, err := redisPID(r)
		if err != nil {
			b.Fatal(err)
		}
		redisPIDs = append(redisPIDs, pid)
	case "cluster":
		rig := harness.NewClusterRig(b, harness.ClusterOptions{})
		opts.RedisURL = rig.URL()
		for _, n := range rig.Nodes() { // replicas too: they apply every write
			pid, err := redisPID(n)
			if err != nil {
				b.Fatal(err)
			}
			redisPIDs = append(redisPIDs, pid)
		}
	default:
		b.Fatalf("unknown deployment %q", deploy)
	}
	var targets []sdkTarget
	for _, nb := range append(strings.Split(*sdkBaseline, ","), "this tree=") {
		name, bin, ok := strings.Cut(nb, "=")
		if !ok {
			continue
		}
		o := opts
		o.Binary = bin
		gw, err := harness.StartGateway(dir, o)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		b.Cleanup(func() { _ = gw.Stop() })
		targets = append(targets, sdkTarget{name: name, url: gw.URL, pid: gw.PID()})
	}

	type figures struct{ rate, gw, redis []float64 }
	results := map[string]*figures{}
	modes := []string{"keyless", "keyed", "go sdk"}
	fmt.Printf("%s: %d clients, %v per mode, %d rounds; cycles/s (gateway + Redis CPU µs per cycle), keyed and go sdk as a share of the round's keyless:\n",
		deploy, *sdkWorkers, *sdkDuration, *sdkRounds)
	// Each round runs the builds, and each build's modes, in another order: on a shared machine the
	// load drifts within a round, and a fixed order would bias the ratios.
	for round := range *sdkRounds {
		for _, t := range rotated(targets, round) {
			for _, mode := range rotated(modes, round) {
				g0, r0 := procCPU(t.pid), processesCPU(redisPIDs)
				n, took, err := sdkCycles(t.url, mode, *sdkWorkers, *sdkDuration)
				if err != nil {
					b.Fatalf("%s %s: %v", t.name, mode, err)
				}
				gw, red := (procCPU(t.pid)-g0)*1e6/float64(max(n, 1)), (processesCPU(redisPIDs)-r0)*1e6/float64(max(n, 1))
				f := results[t.name+"\x00"+mode]
				if f == nil {
					f = &figures{}
					results[t.name+"\x00"+mode] = f
				}
				f.rate, f.gw, f.redis = append(f.rate, float64(n)/took.Seconds()), append(f.gw, gw), append(f.redis, red)
			}
		}
		line := fmt.Sprintf("  round %d:", round+1)
		for _, t := range targets {
			keyless := results[t.name+"\x00keyless"].rate[round]
			for _, mode := range modes {
				f := results[t.name+"\x00"+mode]
				if mode == "keyless" {
					line += fmt.Sprintf(" | %s %s %.0f (%.0f+%.0f)", t.name, mode, f.rate[round], f.gw[round], f.redis[round])
				} else {
					line += fmt.Sprintf(" %s %.0f (%.0f+%.0f, %.2f)", mode, f.rate[round], f.gw[round], f.redis[round], f.rate[round]/keyless)
				}
			}
		}
		fmt.Println(line)
	}
	for _, t := range targets {
		keyless := results[t.name+"\x00keyless"]
		for _, mode := range modes {
			f := results[t.name+"\x00"+mode]
			ratios := make([]float64, len(f.rate))
			for i := range f.rate {
				ratios[i] = f.rate[i] / keyless.rate[i]
			}
			fmt.Printf("  %-10s %-8s cycles/s %s (median %.0f), of keyless %s (median %.2f), gateway CPU per cycle %s, Redis %s",
				t.name, mode, span(f.rate, id, "%.0f"), median(f.rate), span(ratios, id, "%.2f"), median(ratios),
				span(f.gw, id, "%.1f µs"), span(f.redis, id, "%.1f µs"))
			if mode == "go sdk" { // the SDK sends keys: raw HTTP with keys is what it wraps
				keyed := results[t.name+"\x00keyed"]
				for i := range f.rate {
					ratios[i] = f.rate[i] / keyed.rate[i]
				}
				fmt.Printf(", of keyed %s (median %.2f)", span(ratios, id, "%.2f"), median(ratios))
			}
			fmt.Println()
		}
	}
}

// processesCPU is the CPU time of the processes, in seconds.
func processesCPU(pids []int) float64 {
	var s float64
	for _, pid := range pids {
		s += procCPU(pid)
	}
	return s
}

// sdkCycles runs acquire+release cycles on fresh names from workers clients for d, the way mode
// says, and returns how many completed.
func sdkCycles(url, mode string, workers int, d time.Duration) (int, time.Duration, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxIdleConns: workers}}
	defer hc.CloseIdleConnections()
	var sdk *leasegate.Gateway
	if mode == "go sdk" {
		var err error
		if sdk, err = leasegate.New(url, leasegate.WithHTTPClient(hc)); err != nil {
			return 0, 0, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	run := uuid.NewString()[:8]
	var done atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				name := fmt.Sprintf("sdk-%s-%d-%d", run, w, k)
				var err error
				if sdk != nil {
					err = sdkCycle(sdk, name)
				} else {
					err = httpCycle(hc, url, name, mode == "keyed")
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, 0, err
	}
	return int(done.Load()), time.Since(start), nil
}

func sdkCycle(gw *leasegate.Gateway, name string) error {
	l, err := gw.Lock(context.Background(), name, leasegate.LockOptions{Owner: "bench", TTL: 30 * time.Second})
	if err != nil {
		return err
	}
	_, err = l.Release(context.Background())
	return err
}

// httpCycle acquires and releases name with bare HTTP calls, each with a fresh Idempotency-Key
// when keyed.
func httpCycle(hc *http.Client, url, name string, keyed bool) error {
	do := func(method, path, token, body string, want int) ([]byte, error) {
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Lease-Token", token)
		}
		if keyed {
			req.Header.Set("Idempotency-Key", uuid.NewString())
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != want {
			err = fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b, err
	}
	b, err := do(http.MethodPost, "/locks/"+name, "", `{"owner":"bench","ttl_ms":30000}`, http.StatusCreated)
	if err != nil {
		return err
	}
	var g struct{ Token string }
	if err := json.Unmarshal(b, &g); err != nil {
		return err
	}
	_, err = do(http.MethodDelete, "/locks/"+name, g.Token, "", http.StatusOK)
	return err
}
