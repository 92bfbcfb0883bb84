package deployments

import (
	"flag"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
)

var deployRound = flag.Duration("deployments.round", 3*time.Second, "BenchmarkDeployments: length of one measured round")

// BenchmarkDeployments measures a gateway process on each Redis deployment side by side in one
// run, rounds interleaved: uncontended acquire+release cycles (64 keep-alive clients, a name each)
// and the hand-off from a release's request to the next holder's 201 (one lock, two clients taking
// turns, through two replicas). It ignores b.N: run it once.
//
//	go test ./tests/deployments -run '^$' -bench BenchmarkDeployments -benchtime 1x
func BenchmarkDeployments(b *testing.B) {
	type row struct {
		name   string
		urls   [2]string
		cycles []float64
		hand   []time.Duration
	}
	var rows []*row
	add := func(name string, env map[string]string, redis *harness.Redis) {
		prefix := harness.RandomPrefix()
		r := &row{name: name}
		for i := range 2 {
			gw := harness.NewGateway(b, harness.GatewayOptions{Redis: redis, KeyPrefix: prefix, Env: env})
			r.urls[i] = gw.URL
		}
		rows = append(rows, r)
	}
	add("standalone", map[string]string{"LEASEGATE_LOG_LEVEL": "warn"}, harness.NewRedis(b, harness.RedisOptions{}))
	sentinel := harness.NewSentinelRig(b, harness.SentinelOptions{})
	add("sentinel", map[string]string{"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_REDIS_URL": sentinel.URL()}, nil)
	add("sentinel, replica acks 1", map[string]string{"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_REDIS_URL": sentinel.URL(), "LEASEGATE_REPLICA_ACKS": "1"}, nil)
	cluster := harness.NewClusterRig(b, harness.ClusterOptions{})
	add("cluster (3 masters)", map[string]string{"LEASEGATE_LOG_LEVEL": "warn", "LEASEGATE_REDIS_URL": cluster.URL()}, nil)

	for round := range 3 {
		for _, r := range rows {
			c, err := deployCycles(r.urls[0], 64, *deployRound)
			if err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			h, err := deployHandoffs(r.urls, fmt.Sprintf("hand-%d", round), *deployRound)
			if err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			r.cycles, r.hand = append(r.cycles, c), append(r.hand, h...)
		}
	}
	fmt.Printf("deployments, gateway processes, 3 rounds of %v interleaved (medians; cycles: range over rounds):\n", *deployRound)
	base := medianF(rows[0].cycles)
	for _, r := range rows {
		slices.Sort(r.hand)
		fmt.Printf("  %-26s %6.0f cycles/s (%.2fx standalone; rounds %.0f-%.0f); hand-off release request -> 201: p50 %v p99 %v (%d)\n",
			r.name, medianF(r.cycles), medianF(r.cycles)/base, slices.Min(r.cycles), slices.Max(r.cycles),
			r.hand[len(r.hand)/2].Round(time.Microsecond), r.hand[len(r.hand)*99/100].Round(time.Microsecond), len(r.hand))
	}
}

func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// deployCycles runs n clients, each taking and releasing its own lock, for d; cycles per second.
func deployCycles(base string, n int, d time.Duration) (float64, error) {
	body := []byte(`{"owner":"bench","ttl_ms":30000}`)
	return harness.Cycles(n, d, func(i int) (string, []byte, string) {
		url := fmt.Sprintf("%s/locks/cyc-%d", base, i)
		return url, body, url
	})
}

// deployHandoffs has two clients (one per replica) take turns on one lock for d, each waiting for
// it, holding it an instant, releasing it; it returns the times from each release's request to the
// other's 201.
func deployHandoffs(urls [2]string, lock string, d time.Duration) ([]time.Duration, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var (
		mu       sync.Mutex
		released time.Time
		out      []time.Duration
		runErr   error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for i := range 2 {
		wg.Go(func() {
			url := urls[i] + "/locks/" + lock
			for time.Now().Before(deadline) {
				tok, err := harness.Call(client, http.MethodPost, url, "", []byte(`{"owner":"bench","ttl_ms":30000,"wait_ms":10000}`), http.StatusCreated)
				got := time.Now()
				if err == nil {
					mu.Lock()
					if !released.IsZero() {
						out = append(out, got.Sub(released))
						released = time.Time{}
					}
					mu.Unlock()
					mu.Lock()
					released = time.Now()
					mu.Unlock()
					_, err = harness.Call(client, http.MethodDelete, url, tok, nil, http.StatusOK)
				}
				if err != nil {
					mu.Lock()
					runErr = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return out, runErr
}
