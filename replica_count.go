package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/lockcore"
)

// LEASEGATE_REPLICA_ACKS=all: every replica the deployment knows acknowledges each grant. The
// count comes from the deployment's own record of its replicas, not from the master's list of
// connected ones: a replica that is down or lagging still counts (grants then wait for it, and
// answer 503 when it does not come), and an old master that lost a replica to a promotion cannot
// gather enough acknowledgements any more.

// replicaCounter returns how to count "every replica" on the deployment opt and client reach:
// the replicas the sentinels list for the master set (whatever their state), or on a Cluster the
// most replicas any master has (failed ones included). A single Redis has no record of its
// replicas that a failover would keep: it is refused.
func replicaCounter(opt rueidis.ClientOption, client rueidis.Client) (func(context.Context) (int, error), error) {
	switch {
	case opt.Sentinel.MasterSet != "":
		return func(ctx context.Context) (int, error) { return sentinelReplicas(ctx, opt) }, nil
	case client.Mode() == rueidis.ClientModeCluster:
		return func(ctx context.Context) (int, error) { return clusterReplicas(ctx, client) }, nil
	}
	return nil, errors.New(`LEASEGATE_REPLICA_ACKS=all needs Sentinel or a Cluster, which keep a record of their replicas; on a single Redis give the number of its replicas`)
}

// sentinelReplicas asks the sentinels in turn for the replicas of the master set.
func sentinelReplicas(ctx context.Context, opt rueidis.ClientOption) (int, error) {
	var errs []error
	for _, addr := range opt.InitAddress {
		n, err := askSentinel(ctx, opt, addr)
		if err == nil {
			return n, nil
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", addr, err))
	}
	return 0, errors.Join(errs...)
}

func askSentinel(ctx context.Context, opt rueidis.ClientOption, addr string) (int, error) {
	c, err := rueidis.NewClient(lockcore.Tune(rueidis.ClientOption{
		InitAddress: []string{addr}, ForceSingleClient: true, TLSConfig: opt.Sentinel.TLSConfig,
		Username: opt.Sentinel.Username, Password: opt.Sentinel.Password, Dialer: opt.Sentinel.Dialer,
	}))
	if err != nil {
		if c != nil {
			c.Close()
		}
		return 0, err
	}
	defer c.Close()
	replicas, err := c.Do(ctx, c.B().SentinelReplicas().Master(opt.Sentinel.MasterSet).Build()).ToArray()
	return len(replicas), err
}

// clusterReplicas reads CLUSTER NODES: the most replicas any master has.
func clusterReplicas(ctx context.Context, client rueidis.Client) (int, error) {
	nodes, err := client.Do(ctx, client.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return 0, err
	}
	return mostReplicas(nodes), nil
}

// mostReplicas counts, in CLUSTER NODES output, the replicas of each master (a line's fourth
// field is its master's ID, "-" for a master) and returns the largest count.
func mostReplicas(nodes string) int {
	per := map[string]int{}
	most := 0
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] == "-" || !strings.Contains(f[2], "slave") {
			continue
		}
		per[f[3]]++
		most = max(most, per[f[3]])
	}
	return most
}
