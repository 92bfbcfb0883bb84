package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/lockcore"
)

// redisOption turns the Redis settings of cfg into rueidis options: LEASEGATE_REDIS_URL in the
// Redis URL form rueidis parses (redis:// or rediss:// for TLS; ?master_set=NAME with the sentinels'
// addresses for Sentinel; more ?addr= seeds for Cluster), else LEASEGATE_REDIS_ADDR; credentials
// from the URL or LEASEGATE_REDIS_USERNAME/PASSWORD; LEASEGATE_REDIS_TLS_CA to trust a private CA.
// It also names the deployment for the start-up log.
func redisOption(cfg Config) (rueidis.ClientOption, string, error) {
	if cfg.RedisURL == "" {
		if cfg.RedisTLSCA != "" {
			return rueidis.ClientOption{}, "", errors.New("LEASEGATE_REDIS_TLS_CA needs a rediss:// LEASEGATE_REDIS_URL")
		}
		o := lockcore.ClientOption(cfg.RedisAddr, cfg.RedisPassword)
		o.Username = cfg.RedisUsername
		return o, "standalone " + cfg.RedisAddr, nil
	}
	o, err := rueidis.ParseURL(cfg.RedisURL)
	if err != nil {
		return rueidis.ClientOption{}, "", fmt.Errorf("LEASEGATE_REDIS_URL: %w", err)
	}
	if (o.Username != "" || o.Password != "") && (cfg.RedisUsername != "" || cfg.RedisPassword != "") {
		return rueidis.ClientOption{}, "", errors.New("LEASEGATE_REDIS_URL carries credentials: unset LEASEGATE_REDIS_USERNAME and LEASEGATE_REDIS_PASSWORD, or take them out of the URL")
	}
	if cfg.RedisUsername != "" || cfg.RedisPassword != "" {
		o.Username, o.Password = cfg.RedisUsername, cfg.RedisPassword
	}
	if cfg.RedisTLSCA != "" {
		if o.TLSConfig == nil {
			return rueidis.ClientOption{}, "", errors.New("LEASEGATE_REDIS_TLS_CA is set but LEASEGATE_REDIS_URL is not rediss://")
		}
		pem, err := os.ReadFile(cfg.RedisTLSCA)
		if err != nil {
			return rueidis.ClientOption{}, "", fmt.Errorf("LEASEGATE_REDIS_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return rueidis.ClientOption{}, "", fmt.Errorf("LEASEGATE_REDIS_TLS_CA: %s holds no PEM certificate", cfg.RedisTLSCA)
		}
		o.TLSConfig.RootCAs = pool
	}
	addrs := strings.Join(o.InitAddress, ",")
	var deployment string
	switch {
	case o.Sentinel.MasterSet != "":
		deployment = fmt.Sprintf("sentinel master set %q via %s", o.Sentinel.MasterSet, addrs)
		// The sentinels are reached without credentials, over TLS when the masters are, and
		// asked again every few seconds besides their +switch-master events (a missed event
		// would otherwise leave the gateway on a demoted master).
		o.Sentinel.TLSConfig = o.TLSConfig
		o.Sentinel.TopologyRefreshInterval = 5 * time.Second
	case len(o.InitAddress) > 1:
		deployment = "cluster seeds " + addrs
	default:
		deployment = "standalone " + addrs
		o.ForceSingleClient = true // starts while Redis is down, and never probes for a cluster
	}
	if o.TLSConfig != nil {
		deployment += " (TLS)"
	}
	return lockcore.Tune(o), deployment, nil
}

// redlockOptions turns LEASEGATE_REDLOCK_URLS into one rueidis option per master: each a single
// Redis (redis:// or rediss://), with the credentials and CA the other LEASEGATE_REDIS_* settings
// give when its URL carries none.
func redlockOptions(cfg Config) ([]rueidis.ClientOption, string, error) {
	var out []rueidis.ClientOption
	var addrs []string
	for i, u := range cfg.RedlockURLs {
		one := cfg
		one.RedisURL, one.RedlockURLs = strings.TrimSpace(u), nil
		o, _, err := redisOption(one)
		if err != nil {
			return nil, "", fmt.Errorf("LEASEGATE_REDLOCK_URLS, URL %d: %s", i+1, strings.TrimPrefix(err.Error(), "LEASEGATE_REDIS_URL: "))
		}
		if o.Sentinel.MasterSet != "" || len(o.InitAddress) != 1 {
			return nil, "", fmt.Errorf("LEASEGATE_REDLOCK_URLS, URL %d: each RedLock master is one Redis address", i+1)
		}
		out = append(out, o)
		addrs = append(addrs, o.InitAddress[0])
	}
	return out, fmt.Sprintf("redlock of %d masters %s", len(out), strings.Join(addrs, ",")), nil
}

// refuseLoneClusterNode reports a Redis given as one address that turns out to be a Cluster node (asked
// when it answers at start): a single client would only half work with it (keys of other slots
// answer MOVED). A Cluster is given by its seeds.
func refuseLoneClusterNode(ctx context.Context, client rueidis.Client, deployment string) error {
	if client.Mode() == rueidis.ClientModeCluster {
		return nil
	}
	info, err := client.Do(ctx, client.B().Info().Section("cluster").Build()).ToString()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return fmt.Errorf("%s is a Redis Cluster node: give the Cluster's seed addresses, as LEASEGATE_REDIS_URL=redis://node1:port?addr=node2:port&addr=node3:port", deployment)
	}
	return nil
}
