package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/kelseyhightower/envconfig"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/handlers"
	"github.com/leasegate/leasegate/lockcore"
)

// Config is read from LEASEGATE_* environment variables (docs/configuration.md lists them).
type Config struct {
	Listen            string        `default:"127.0.0.1:8080"`
	RedisAddr         string        `split_words:"true" default:"127.0.0.1:6379"`
	RedisURL          string        `envconfig:"REDIS_URL"`
	RedisUsername     string        `split_words:"true"`
	RedisPassword     string        `split_words:"true"`
	RedisTLSCA        string        `envconfig:"REDIS_TLS_CA"`
	RedlockURLs       []string      `envconfig:"REDLOCK_URLS"`
	RedlockNew        bool          `envconfig:"REDLOCK_NEW_DEPLOYMENT"`
	ReplicaAcks       ReplicaAcks   `split_words:"true" default:"0"`
	ReplicaAckTimeout time.Duration `split_words:"true" default:"500ms"`
	TokenSecret       string        `split_words:"true"`
	KeyPrefix         string        `split_words:"true" default:"leasegate:"`
	DefaultTTL        time.Duration `split_words:"true" default:"30s"`
	MaxTTL            time.Duration `split_words:"true" default:"1h"`
	MaxWait           time.Duration `split_words:"true" default:"60s"`
	MaxHold           time.Duration `split_words:"true" default:"1h"`
	MaxWaiters        int           `split_words:"true" default:"10000"`
	MaxStreams        int           `split_words:"true" default:"1000"`
	MaxStreamLifetime time.Duration `split_words:"true" default:"1h"`
	FenceTTL          time.Duration `split_words:"true" default:"10m"`
	ElectionLog       int           `split_words:"true" default:"1000"`
	ElectionLogBytes  int           `split_words:"true" default:"131072"`
	ElectionRetention time.Duration `split_words:"true" default:"1h"`
	ShutdownTimeout   time.Duration `split_words:"true" default:"30s"`
	LogLevel          string        `split_words:"true" default:"info"`
	AccessLog         string        `split_words:"true" default:"errors"`
	LongHold          time.Duration `split_words:"true" default:"10m"`
	Metrics           bool          `default:"true"`
	TLSCertFile       string        `envconfig:"TLS_CERT_FILE"`
	TLSKeyFile        string        `envconfig:"TLS_KEY_FILE"`
	TLSClientCAFile   string        `envconfig:"TLS_CLIENT_CA_FILE"`
	AuthFile          string        `split_words:"true"`
	QuotaRate         float64       `split_words:"true" default:"0"`
	QuotaBurst        int           `split_words:"true" default:"0"`
	QuotaParked       int           `split_words:"true" default:"0"`
	QuotaHeld         int           `split_words:"true" default:"0"`
	QuotaStreams      int           `split_words:"true" default:"0"`
	AuthFailureRate   float64       `split_words:"true" default:"20"`
	TrustedProxies    string        `split_words:"true"`
	MetricsAuth       string        `split_words:"true" default:"open"`
	// Names shared with Redisson (docs/redisson.md): lock-name prefixes ("*": every name) whose
	// locks are Redisson RLocks, and RReadWriteLocks.
	RedissonLocks   []string `split_words:"true"`
	RedissonRWLocks []string `envconfig:"REDISSON_RWLOCKS"`
	// RedissonWatchdogTimeout is the Redisson clients' lockWatchdogTimeout: the longest TTL on
	// read-write lock names shared with Redisson.
	RedissonWatchdogTimeout time.Duration `split_words:"true" default:"30s"`
}

// authQuotaDefaults are the quotas every principal has when an auth file is set and the variable
// is not (an explicit 0 means no limit). The rate bounds what one principal can make Redis keep
// (docs/auth.md, "What one principal can cost"): every hold and idempotency record
// comes from a request and lasts an hour at most. LEASEGATE_QUOTA_HELD stays off by default: its
// count costs two Redis round trips per acquire and release.
var authQuotaDefaults = map[string]func(*Config){
	"QUOTA_RATE":    func(c *Config) { c.QuotaRate = 100 },
	"QUOTA_STREAMS": func(c *Config) { c.QuotaStreams = 100 },
}

// loadConfig reads the environment and rejects bad values, naming the variable.
func loadConfig() (Config, error) {
	var cfg Config
	if err := envconfig.Process("leasegate", &cfg); err != nil {
		return Config{}, err
	}
	if cfg.AuthFile != "" {
		for name, set := range authQuotaDefaults {
			if _, given := os.LookupEnv("LEASEGATE_" + name); !given {
				set(&cfg)
			}
		}
	}
	// envconfig lets a set-but-empty variable bypass its default; an empty value is a mistake.
	for _, name := range []string{"LISTEN", "REDIS_ADDR", "REDIS_URL", "REDIS_USERNAME", "REDIS_PASSWORD", "REDIS_TLS_CA",
		"REDLOCK_URLS", "REPLICA_ACKS", "REPLICA_ACK_TIMEOUT", "TOKEN_SECRET", "KEY_PREFIX",
		"DEFAULT_TTL", "MAX_TTL", "MAX_WAIT", "MAX_HOLD", "MAX_WAITERS", "MAX_STREAMS", "MAX_STREAM_LIFETIME", "FENCE_TTL", "SHUTDOWN_TIMEOUT", "LOG_LEVEL",
		"TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_CLIENT_CA_FILE", "AUTH_FILE", "METRICS_AUTH",
		"QUOTA_RATE", "QUOTA_BURST", "QUOTA_PARKED", "QUOTA_HELD", "QUOTA_STREAMS", "AUTH_FAILURE_RATE",
		"REDISSON_LOCKS", "REDISSON_RWLOCKS", "REDISSON_WATCHDOG_TIMEOUT"} {
		if v, ok := os.LookupEnv("LEASEGATE_" + name); ok && strings.TrimSpace(v) == "" {
			return Config{}, fmt.Errorf("LEASEGATE_%s is set but empty; unset it to use the default", name)
		}
	}
	check := func(ok bool, name, format string, a ...any) error {
		if ok {
			return nil
		}
		return fmt.Errorf("LEASEGATE_%s: "+format, append([]any{name}, a...)...)
	}
	_, _, listenErr := net.SplitHostPort(cfg.Listen)
	_, _, redisErr := net.SplitHostPort(cfg.RedisAddr)
	_, proxiesErr := handlers.ParseTrustedProxies(cfg.TrustedProxies)
	var level slog.Level
	levelErr := level.UnmarshalText([]byte(cfg.LogLevel))
	return cfg, errors.Join(
		check(listenErr == nil, "LISTEN", "%q is not host:port", cfg.Listen),
		check(redisErr == nil, "REDIS_ADDR", "%q is not host:port", cfg.RedisAddr),
		check(cfg.RedisURL == "" || os.Getenv("LEASEGATE_REDIS_ADDR") == "", "REDIS_URL", "and LEASEGATE_REDIS_ADDR are both set: give one"),
		check(len(cfg.RedlockURLs) == 0 || slices.Contains([]int{3, 5, 7}, len(cfg.RedlockURLs)), "REDLOCK_URLS",
			"takes 3, 5 or 7 comma-separated Redis URLs, got %d", len(cfg.RedlockURLs)),
		check(len(cfg.RedlockURLs) == 0 || (cfg.RedisURL == "" && os.Getenv("LEASEGATE_REDIS_ADDR") == ""), "REDLOCK_URLS",
			"and LEASEGATE_REDIS_URL or LEASEGATE_REDIS_ADDR are both set: give one deployment"),
		check(len(cfg.RedlockURLs) == 0 || cfg.ReplicaAcks.off(), "REPLICA_ACKS",
			"does not apply to RedLock's independent masters (LEASEGATE_REDLOCK_URLS)"),
		check(len(cfg.RedlockURLs) == 0 || len(cfg.RedissonLocks)+len(cfg.RedissonRWLocks) == 0, "REDISSON_LOCKS",
			"(and LEASEGATE_REDISSON_RWLOCKS) do not apply to RedLock (LEASEGATE_REDLOCK_URLS): a Redisson lock lives on one Redis"),
		redissonPrefixes(cfg),
		check(cfg.RedissonWatchdogTimeout >= time.Second, "REDISSON_WATCHDOG_TIMEOUT", "must be at least 1s, got %v", cfg.RedissonWatchdogTimeout),
		check(cfg.ReplicaAckTimeout > 0, "REPLICA_ACK_TIMEOUT", "must be positive, got %v", cfg.ReplicaAckTimeout),
		check(cfg.TokenSecret == "" || len(cfg.TokenSecret) >= 16, "TOKEN_SECRET", "must be at least 16 bytes"),
		check(!strings.ContainsAny(cfg.KeyPrefix, "{}"), "KEY_PREFIX", "%q must not contain '{' or '}'", cfg.KeyPrefix),
		check(!strings.ContainsFunc(cfg.KeyPrefix, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }),
			"KEY_PREFIX", "%q must not contain whitespace or control characters (live events would be lost)", cfg.KeyPrefix),
		check(cfg.MaxTTL > 0, "MAX_TTL", "must be positive, got %v", cfg.MaxTTL),
		check(cfg.DefaultTTL > 0 && cfg.DefaultTTL <= cfg.MaxTTL, "DEFAULT_TTL", "must be positive and at most LEASEGATE_MAX_TTL (%v), got %v", cfg.MaxTTL, cfg.DefaultTTL),
		check(cfg.MaxWait > 0, "MAX_WAIT", "must be positive, got %v", cfg.MaxWait),
		check(cfg.MaxHold > 0, "MAX_HOLD", "must be positive, got %v", cfg.MaxHold),
		check(cfg.MaxWaiters > 0, "MAX_WAITERS", "must be positive, got %d", cfg.MaxWaiters),
		check(cfg.MaxStreams >= 0, "MAX_STREAMS", "must not be negative, got %d", cfg.MaxStreams),
		check(cfg.MaxStreamLifetime >= 0, "MAX_STREAM_LIFETIME", "must not be negative, got %v", cfg.MaxStreamLifetime),
		check(cfg.FenceTTL >= time.Minute, "FENCE_TTL", "must be at least 1m, got %v", cfg.FenceTTL),
		check(cfg.ElectionLog >= 1 && cfg.ElectionLog <= 1000000, "ELECTION_LOG", "must be between 1 and 1000000 events, got %d", cfg.ElectionLog),
		check(cfg.ElectionLogBytes >= 1024 && cfg.ElectionLogBytes <= 64<<20, "ELECTION_LOG_BYTES", "must be between 1024 and 67108864 bytes, got %d", cfg.ElectionLogBytes),
		check(cfg.ElectionRetention >= max(time.Minute, cfg.MaxTTL), "ELECTION_RETENTION",
			"must be at least 1m and LEASEGATE_MAX_TTL (%v: a leader's value must outlive its lease), got %v", cfg.MaxTTL, cfg.ElectionRetention),
		check(cfg.ShutdownTimeout > 0, "SHUTDOWN_TIMEOUT", "must be positive, got %v", cfg.ShutdownTimeout),
		check(levelErr == nil, "LOG_LEVEL", "%q is not debug, info, warn or error", cfg.LogLevel),
		check(cfg.LongHold > 0, "LONG_HOLD", "must be positive, got %v", cfg.LongHold),
		check(slices.Contains([]string{"errors", "all", "off"}, cfg.AccessLog), "ACCESS_LOG", "%q is not errors, all or off", cfg.AccessLog),
		check(cfg.TLSKeyFile != "" || cfg.TLSCertFile == "", "TLS_CERT_FILE", "is set without LEASEGATE_TLS_KEY_FILE: give both"),
		check(cfg.TLSCertFile != "" || cfg.TLSKeyFile == "", "TLS_KEY_FILE", "is set without LEASEGATE_TLS_CERT_FILE: give both"),
		check(cfg.TLSCertFile != "" || cfg.TLSClientCAFile == "", "TLS_CLIENT_CA_FILE", "needs LEASEGATE_TLS_CERT_FILE and LEASEGATE_TLS_KEY_FILE"),
		check(cfg.QuotaRate >= 0, "QUOTA_RATE", "must not be negative, got %g", cfg.QuotaRate),
		check(cfg.QuotaBurst >= 0, "QUOTA_BURST", "must not be negative, got %d", cfg.QuotaBurst),
		check(cfg.QuotaParked >= 0, "QUOTA_PARKED", "must not be negative, got %d", cfg.QuotaParked),
		check(cfg.QuotaHeld >= 0, "QUOTA_HELD", "must not be negative, got %d", cfg.QuotaHeld),
		check(cfg.QuotaStreams >= 0, "QUOTA_STREAMS", "must not be negative, got %d", cfg.QuotaStreams),
		check(cfg.AuthFailureRate >= 0, "AUTH_FAILURE_RATE", "must not be negative, got %g", cfg.AuthFailureRate),
		check(proxiesErr == nil, "TRUSTED_PROXIES", "%v", proxiesErr),
		check(cfg.AuthFile != "" || (cfg.QuotaRate == 0 && cfg.QuotaParked == 0 && cfg.QuotaHeld == 0 && cfg.QuotaStreams == 0), "QUOTA_RATE",
			"LEASEGATE_QUOTA_PARKED, LEASEGATE_QUOTA_STREAMS and LEASEGATE_QUOTA_HELD limit principals: they need LEASEGATE_AUTH_FILE"),
		check(cfg.QuotaHeld == 0 || len(cfg.RedlockURLs) == 0, "QUOTA_HELD", "is not offered on RedLock (LEASEGATE_REDLOCK_URLS)"),
		check(slices.Contains([]string{"open", "admin"}, cfg.MetricsAuth), "METRICS_AUTH", "%q is not open or admin", cfg.MetricsAuth),
		check(cfg.MetricsAuth == "open" || cfg.AuthFile != "", "METRICS_AUTH", "admin needs LEASEGATE_AUTH_FILE"),
	)
}

// ReplicaAcks is LEASEGATE_REPLICA_ACKS: how many replicas acknowledge each grant, a number (0:
// none) or "all", every replica the deployment knows (Sentinel and Cluster only).
type ReplicaAcks struct {
	N   int
	All bool
}

// Decode reads a number or "all" (envconfig.Decoder).
func (r *ReplicaAcks) Decode(v string) error {
	if strings.EqualFold(strings.TrimSpace(v), "all") {
		*r = ReplicaAcks{All: true}
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return fmt.Errorf("%q is neither a number of replicas (0 or more) nor \"all\"", v)
	}
	*r = ReplicaAcks{N: n}
	return nil
}

func (r ReplicaAcks) off() bool { return !r.All && r.N == 0 }

func (r ReplicaAcks) String() string {
	if r.All {
		return "all"
	}
	return strconv.Itoa(r.N)
}

// redissonPrefixes checks LEASEGATE_REDISSON_LOCKS and LEASEGATE_REDISSON_RWLOCKS: each prefix is
// "*" or what may start a lock name (api.ValidateLockName's characters), and lockcore refuses
// prefixes that overlap each other or the key prefix (checked at start, with the same message).
func redissonPrefixes(cfg Config) error {
	for name, list := range map[string][]string{"REDISSON_LOCKS": cfg.RedissonLocks, "REDISSON_RWLOCKS": cfg.RedissonRWLocks} {
		for _, p := range list {
			if p == "*" {
				continue
			}
			if err := api.ValidateLockName(p); err != nil {
				return fmt.Errorf("LEASEGATE_%s: prefix %q: %w", name, p, err)
			}
		}
	}
	opts := lockcore.RedissonNames{Locks: cfg.RedissonLocks, RWLocks: cfg.RedissonRWLocks}
	if err := opts.Check(cfg.KeyPrefix); err != nil {
		return fmt.Errorf("LEASEGATE_REDISSON_LOCKS / LEASEGATE_REDISSON_RWLOCKS: %w", err)
	}
	return nil
}
