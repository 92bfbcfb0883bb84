package deployments

import (
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

var redlockRound = flag.Duration("redlock.round", 3*time.Second, "BenchmarkRedLock: length of one measured round")

// redlockCallCycles is how many acquire+release cycles the round-trip count divides by.
const redlockCallCycles = 200

// BenchmarkRedLock measures a gateway process on one redis-server and one on five RedLock masters
// side by side in one run, rounds interleaved: uncontended acquire+release cycles (8 keep-alive
// clients, a name each), the hand-off from a release's request to the next holder's 201 (one
// lock, two clients taking turns, through two replicas), and the Redis round trips per grant on
// each server: script calls (INFO commandstats) over sequential acquire+release cycles. (INFO
// stats' command total is no measure of round trips: it counts the commands scripts run.)
// It ignores b.N: run it once.
//
//	go test ./tests/deployments -run '^$' -bench BenchmarkRedLock -benchtime 1x
func BenchmarkRedLock(b *testing.B) {
	type row struct {
		name    string
		urls    [2]string
		servers []*harness.Redis
		cycles  []float64
		hand    []time.Duration
		scripts []float64 // per grant, one per server
	}
	var rows []*row
	add := func(name string, env map[string]string, redis *harness.Redis, servers []*harness.Redis) {
		prefix := harness.RandomPrefix()
		r := &row{name: name, servers: servers}
		for i := range 2 {
			gw := harness.NewGateway(b, harness.GatewayOptions{Redis: redis, KeyPrefix: prefix, Env: env})
			r.urls[i] = gw.URL
		}
		rows = append(rows, r)
	}
	single := harness.NewRedis(b, harness.RedisOptions{})
	add("standalone", map[string]string{"LEASEGATE_LOG_LEVEL": "warn"}, single, []*harness.Redis{single})
	rig := harness.NewRedLockRig(b, 5)
	add("redlock (5 masters)", map[string]string{"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_REDLOCK_URLS": rig.URLs(),
		"LEASEGATE_REDLOCK_NEW_DEPLOYMENT": "true"}, nil, rig.Masters())

	for round := range 3 {
		for _, r := range rows {
			c, err := deployCycles(r.urls[0], 8, *redlockRound)
			if err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			h, err := deployHandoffs(r.urls, fmt.Sprintf("hand-%d", round), *redlockRound)
			if err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			r.cycles, r.hand = append(r.cycles, c), append(r.hand, h...)
		}
	}
	for _, r := range rows {
		var err error
		if r.scripts, err = scriptCallsPerGrant(r.urls[0], r.servers); err != nil {
			b.Fatalf("%s: %v", r.name, err)
		}
	}

	fmt.Printf("redlock vs standalone, gateway processes, 3 rounds of %v interleaved (medians; cycles: range over rounds):\n", *redlockRound)
	base := rows[0]
	slices.Sort(base.hand)
	baseHand := base.hand[len(base.hand)/2]
	for _, r := range rows {
		slices.Sort(r.hand)
		p50 := r.hand[len(r.hand)/2]
		fmt.Printf("  %-20s %6.0f cycles/s (%.2fx standalone; rounds %.0f-%.0f); hand-off release request -> 201: p50 %v (%.2fx) p99 %v (%d)\n",
			r.name, medianF(r.cycles), medianF(r.cycles)/medianF(base.cycles), slices.Min(r.cycles), slices.Max(r.cycles),
			p50.Round(time.Microsecond), float64(p50)/float64(baseHand), r.hand[len(r.hand)*99/100].Round(time.Microsecond), len(r.hand))
	}
	fmt.Printf("Redis round trips (script calls) per grant, over %d sequential acquire+release cycles:\n", redlockCallCycles)
	for _, r := range rows {
		fmt.Printf("  %-20s per master %s; all masters %.2f (%.2fx standalone)\n",
			r.name, perServer(r.scripts), sumF(r.scripts), sumF(r.scripts)/sumF(base.scripts))
	}
}

// scriptCallsPerGrant runs redlockCallCycles sequential acquire+release cycles on one lock through
// the gateway at base and returns, per server, the script calls it ran per grant.
func scriptCallsPerGrant(base string, servers []*harness.Redis) ([]float64, error) {
	for _, s := range servers {
		if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
			return nil, err
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := base + "/locks/round-trips"
	for range redlockCallCycles {
		tok, err := harness.Call(client, http.MethodPost, url, "", []byte(`{"owner":"bench","ttl_ms":30000}`), http.StatusCreated)
		if err == nil {
			_, err = harness.Call(client, http.MethodDelete, url, tok, nil, http.StatusOK)
		}
		if err != nil {
			return nil, err
		}
	}
	var out []float64
	for _, s := range servers {
		calls, err := s.ScriptCalls()
		if err != nil {
			return nil, err
		}
		out = append(out, float64(calls)/redlockCallCycles)
	}
	return out, nil
}

func sumF(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// perServer renders figures per server as "2.00" or "[2.00 2.00 ...]".
func perServer(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "[" + strings.Join(parts, " ") + "]"
}
