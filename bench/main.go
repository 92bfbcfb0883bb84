// Command bench measures leasegate on this machine, printing figures and ratios measured side by
// side in one run. It starts its own redis-server on a free loopback port.
//
//	go run ./bench                      # every scenario
//	go run ./bench -only throughput     # one scenario
//	go run ./bench -only waitmem -rounds 3 -baseline-rev base=COMMIT   # memory per waiting request
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/handlers"
	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

var (
	only      = flag.String("only", "", "run one scenario: throughput, handoff, rwsem, multilock, acks, waiting, waitmem, outside, memory")
	duration  = flag.Duration("duration", 3*time.Second, "length of one measured round")
	rounds    = flag.Int("rounds", 3, "rounds per side; the median is reported")
	clients   = flag.Int("clients", 64, "keep-alive HTTP clients for throughput")
	flush     = flag.Duration("flush-delay", 0, "rueidis MaxFlushDelay for the gateway's Redis client")
	waiters   = flag.Int("waiters", 10000, "long-polls held at once in the waiting scenario")
	waitLocks = flag.Int("wait-locks", 1000, "lock names the waiting scenario's long-polls spread over")
	baseline  = flag.String("baseline", "", "waiting and outside scenarios: other gateway builds to measure side by side, as name=path[,name=path] (e.g. builds of earlier commits)")
	gwEnv     = flag.String("gateway-env", "", "waiting scenario: extra environment for this tree's gateway in an extra row, e.g. GOMEMLIMIT=300MiB")
	lgbench   = flag.String("lgbench", "", "waiting and outside scenarios: the outside load generator's binary (build ../shared/lgbench)")
	multiplex = flag.Int("pipeline-multiplex", 0, "rueidis PipelineMultiplex for the in-process gateway (0: lockcore's default)")
	noPipe    = flag.Bool("no-auto-pipelining", false, "rueidis DisableAutoPipelining for the in-process gateway")
	holdsFlag = flag.Int("holds", 5000, "memory scenario: holds (locks, permits, waiters) measured per row")
	cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")

	baselineRev = flag.String("baseline-rev", "", "waitmem scenario: git revisions of this repository to build and measure side by side, as name=rev[,name=rev]")
	memprofDir  = flag.String("memprofile-dir", "", "waitmem scenario: write each gateway's heap and goroutine profiles, taken while its requests wait (last round), into this directory")
	memLocks    = flag.String("waitmem-locks", "1,10000", "waitmem scenario: the numbers of lock names the waiting requests spread over, one row each")
	memEnv      = flag.String("waitmem-env", "", "waitmem scenario: extra environment for this tree's gateway in extra rows, e.g. GODEBUG=adaptivestackstart=0")
	memRate     = flag.Int("memprofile-rate", 0, "waitmem scenario: runtime.MemProfileRate in the servers (1: every allocation, for exact heap profiles; slows them and adds to their RSS)")
	floorAddr   = flag.String("serve-floor", "", "serve the waitmem scenario's net/http floor on this address (the scenario starts this binary so)")
)

func main() {
	flag.Parse()
	if *floorAddr != "" {
		fmt.Fprintln(os.Stderr, "bench: floor:", serveWaitFloor(*floorAddr))
		os.Exit(1)
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "leasegate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	redis, err := harness.StartRedis(dir, harness.RedisOptions{})
	if err != nil {
		return err
	}
	defer redis.Stop()
	fmt.Printf("machine: %s/%s, %d CPUs, %s; redis-server on %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), redis.Addr)

	if *only == "" || *only == "throughput" {
		if err := throughput(redis); err != nil {
			return err
		}
	}
	if *only == "" || *only == "handoff" {
		fmt.Printf("hand-off on one contended lock, waiters spread over 2 gateway replicas, %v per row:\n", *duration)
		for _, n := range []int{1, 10, 100} {
			if err := handoff(redis, n, *duration); err != nil {
				return err
			}
		}
	}
	if *only == "" || *only == "rwsem" {
		fmt.Printf("read-write lock and semaphore hand-offs, waiters spread over 2 gateway replicas, %v per row (%d rounds):\n", *duration, *rounds)
		for range *rounds {
			if err := readWrite(redis, *duration); err != nil {
				return err
			}
			if err := semaphore(redis, *duration); err != nil {
				return err
			}
			if err := handoff(redis, 100, *duration); err != nil {
				return err
			}
		}
	}
	if *only == "" || *only == "multilock" {
		if err := multiLocks(redis); err != nil {
			return err
		}
	}
	if *only == "" || *only == "acks" {
		if err := replicaAcks(dir, redis); err != nil {
			return err
		}
	}
	if *only == "" || *only == "memory" {
		if err := memory(redis); err != nil {
			return err
		}
	}
	if *only == "" || *only == "waiting" {
		if err := waiting(dir, redis); err != nil {
			return err
		}
	}
	if *only == "waitmem" { // minutes of 10,000 connections per server: only when asked for
		if err := waitmem(dir, redis); err != nil {
			return err
		}
	}
	if (*only == "" && *lgbench != "") || *only == "outside" {
		if err := outside(dir, redis); err != nil {
			return err
		}
	}
	return nil
}

// gateway is an in-process leasegate wired as main wires it, on a loopback port.
type gateway struct {
	URL    string
	srv    *http.Server
	client rueidis.Client
	svc    *lockcore.Service
}

func startGateway(redisAddr, prefix string) (*gateway, error) {
	return startGatewayWith(redisAddr, lockcore.Options{KeyPrefix: prefix})
}

// startGatewayWith is startGateway with lockcore options of the caller's.
func startGatewayWith(redisAddr string, opts lockcore.Options) (*gateway, error) {
	client, err := rueidis.NewClient(with(lockcore.ClientOption(redisAddr, ""), *flush))
	if err != nil {
		return nil, err
	}
	tokens, _ := lockcore.NewTokens([]byte(harness.TestTokenSecret))
	svc, err := lockcore.New(client, tokens, opts)
	if err != nil {
		return nil, err
	}
	g, err := serve(svc)
	if err != nil {
		return nil, err
	}
	g.client, g.svc = client, svc
	return g, nil
}

// serve puts locker behind the gateway's router on a loopback port.
func serve(locker handlers.Locker) (*gateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := newServer(locker, ln)
	return &gateway{URL: "http://" + ln.Addr().String(), srv: srv}, nil
}

// newServer serves locker on ln as main does: the gateway's router, logs formatted as in
// production and discarded.
func newServer(locker handlers.Locker, ln net.Listener) *http.Server {
	router := handlers.NewRouter(locker, handlers.Options{
		Limits: api.Limits{DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute, MaxHold: time.Hour},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv
}

func (g *gateway) Close() {
	_ = g.srv.Shutdown(context.Background())
	if g.svc != nil {
		g.svc.Close()
	}
	if g.client != nil {
		g.client.Close()
	}
}

func with(o rueidis.ClientOption, flush time.Duration) rueidis.ClientOption {
	o.MaxFlushDelay = flush
	o.DisableAutoPipelining = *noPipe
	if *multiplex != 0 {
		o.PipelineMultiplex = *multiplex
	}
	return o
}
