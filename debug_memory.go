//go:build memdebug

// A gateway built with -tags memdebug (by go run ./bench -only waitmem, never for a release)
// serves, on LEASEGATE_DEBUG_LISTEN, net/http/pprof under /debug/pprof/ (CPU profiles too) and GET /debug/memory:
// after a forced GC, the Go heap's live objects, the goroutine stacks and the goroutines, as JSON.
// LEASEGATE_DEBUG_MEMPROFILERATE sets runtime.MemProfileRate (1: exact heap profiles).
// This file stands alone (the standard library only), so the bench can copy it into a tree of
// an earlier commit and measure that build the same way.

package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
)

func init() {
	addr := os.Getenv("LEASEGATE_DEBUG_LISTEN")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic("LEASEGATE_DEBUG_LISTEN: " + err.Error())
	}
	if rate, _ := strconv.Atoi(os.Getenv("LEASEGATE_DEBUG_MEMPROFILERATE")); rate > 0 {
		runtime.MemProfileRate = rate
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile) // CPU profiles, for the cost benches
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
	go func() { _ = http.Serve(ln, mux) }()
}
