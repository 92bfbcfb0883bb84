package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// replicaAcks measures what replica-acknowledged grants cost: uncontended acquire+release cycles
// against a master with one replica, without acks and with LEASEGATE_REPLICA_ACKS=1, rows
// interleaved round by round.
func replicaAcks(dir string, master *harness.Redis) error {
	rdir := filepath.Join(dir, "replica")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return err
	}
	replica, err := harness.StartRedis(rdir, harness.RedisOptions{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	if err != nil {
		return err
	}
	defer replica.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, _ := replica.Do("INFO", "replication")
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica never synced: %s", info)
		}
		time.Sleep(50 * time.Millisecond) // polling back-off
	}
	type row struct {
		name  string
		acks  int
		gw    *gateway
		rates []float64
		cpu   []float64
	}
	rows := []*row{{name: "no acks", acks: 0}, {name: "replica acks 1", acks: 1}}
	for _, r := range rows {
		g, err := startGatewayWith(master.Addr, lockcore.Options{KeyPrefix: harness.RandomPrefix(), ReplicaAcks: r.acks})
		if err != nil {
			return err
		}
		defer g.Close()
		r.gw = g
	}
	for range *rounds {
		for _, r := range rows {
			p0, r0 := processCPU(), redisCPU(master)+redisCPU(replica)
			rate, err := cycles(r.gw.URL, *clients, *duration)
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			r.cpu = append(r.cpu, 1e6*(processCPU()-p0+redisCPU(master)+redisCPU(replica)-r0)/(rate*duration.Seconds()))
			r.rates = append(r.rates, rate)
		}
	}
	fmt.Printf("replica-acknowledged grants, master + 1 replica, uncontended acquire+release cycles (%d clients, %d x %v rounds interleaved, medians):\n", *clients, *rounds, *duration)
	base := median(rows[0].rates)
	for _, r := range rows {
		fmt.Printf("  %-15s %6.0f cycles/s (%.2fx the time per cycle; rounds %s); %4.0f µs CPU per cycle (this process, master and replica)\n",
			r.name, median(r.rates), base/median(r.rates), span(r.rates, func(v float64) float64 { return v }, "%.0f"), median(r.cpu))
	}
	return nil
}
