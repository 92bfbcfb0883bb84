package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAuthTurnsOnDefaultQuotas: with an auth file, every principal has a rate and a streams
// quota unless the variable is set (0: none); without one, none. Holds are not counted by default.
func TestAuthTurnsOnDefaultQuotas(t *testing.T) {
	t.Setenv("LEASEGATE_AUTH_FILE", "/etc/leasegate/auth.json")
	cfg, err := loadConfig()
	require.NoError(t, err)
	assert.Equal(t, 100.0, cfg.QuotaRate)
	assert.Equal(t, 0, cfg.QuotaHeld)
	assert.Equal(t, 100, cfg.QuotaStreams)
	assert.Equal(t, 0, cfg.QuotaParked)
	assert.Equal(t, 10*time.Minute, cfg.FenceTTL)
	assert.Equal(t, 1000, cfg.MaxStreams)
	assert.Equal(t, time.Hour, cfg.MaxStreamLifetime)

	t.Setenv("LEASEGATE_QUOTA_RATE", "0")
	t.Setenv("LEASEGATE_QUOTA_STREAMS", "7")
	cfg, err = loadConfig()
	require.NoError(t, err)
	assert.Equal(t, 0.0, cfg.QuotaRate, "an explicit 0: no limit")
	assert.Equal(t, 7, cfg.QuotaStreams)

}

func TestNoAuthNoQuotas(t *testing.T) {
	cfg, err := loadConfig()
	require.NoError(t, err)
	assert.Zero(t, cfg.QuotaRate)
	assert.Zero(t, cfg.QuotaHeld)
	assert.Zero(t, cfg.QuotaStreams)

	t.Setenv("LEASEGATE_QUOTA_STREAMS", "5")
	_, err = loadConfig()
	assert.ErrorContains(t, err, "need LEASEGATE_AUTH_FILE")
}

// TestElectionSettings: an election's log keeps 1000 events and 128 KiB of them for 1 h by
// default (docs/auth.md's bound), and its retention must outlive the longest lease
// (LEASEGATE_MAX_TTL).
func TestElectionSettings(t *testing.T) {
	cfg, err := loadConfig()
	require.NoError(t, err)
	assert.Equal(t, 1000, cfg.ElectionLog)
	assert.Equal(t, 128<<10, cfg.ElectionLogBytes)
	assert.Equal(t, time.Hour, cfg.ElectionRetention)

	t.Setenv("LEASEGATE_ELECTION_RETENTION", "30m")
	_, err = loadConfig()
	assert.ErrorContains(t, err, "LEASEGATE_ELECTION_RETENTION")
	t.Setenv("LEASEGATE_MAX_TTL", "10m")
	_, err = loadConfig()
	assert.NoError(t, err)
	t.Setenv("LEASEGATE_ELECTION_LOG_BYTES", "100")
	_, err = loadConfig()
	assert.ErrorContains(t, err, "LEASEGATE_ELECTION_LOG_BYTES")
	t.Setenv("LEASEGATE_ELECTION_LOG_BYTES", "4096")
	t.Setenv("LEASEGATE_ELECTION_LOG", "0")
	_, err = loadConfig()
	assert.ErrorContains(t, err, "LEASEGATE_ELECTION_LOG")
}

// TestRedissonSettings: names shared with Redisson are refused at start, naming the variable, when
// a name could be both kinds of Redisson lock, when a prefix overlaps the key prefix or holds a
// character no lock name may, and on RedLock.
func TestRedissonSettings(t *testing.T) {
	t.Setenv("LEASEGATE_REDISSON_LOCKS", "orders.,jobs.")
	t.Setenv("LEASEGATE_REDISSON_RWLOCKS", "reports.")
	cfg, err := loadConfig()
	require.NoError(t, err)
	assert.Equal(t, []string{"orders.", "jobs."}, cfg.RedissonLocks)
	assert.Equal(t, 30*time.Second, cfg.RedissonWatchdogTimeout)

	for _, bad := range []struct{ locks, rwlocks, want string }{
		{"orders.", "orders.big.", "make the prefixes disjoint"},
		{"*", "reports.", "make the prefixes disjoint"},
		{"lease", "reports.", "overlaps the gateway's key prefix"},
		{"a{b}", "reports.", "LEASEGATE_REDISSON_LOCKS: prefix \"a{b}\""},
	} {
		t.Setenv("LEASEGATE_REDISSON_LOCKS", bad.locks)
		t.Setenv("LEASEGATE_REDISSON_RWLOCKS", bad.rwlocks)
		_, err := loadConfig()
		assert.ErrorContains(t, err, bad.want, "%s / %s", bad.locks, bad.rwlocks)
	}

	t.Setenv("LEASEGATE_REDISSON_LOCKS", "orders.")
	t.Setenv("LEASEGATE_REDISSON_RWLOCKS", "reports.")
	t.Setenv("LEASEGATE_REDLOCK_URLS", "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3")
	_, err = loadConfig()
	assert.ErrorContains(t, err, "do not apply to RedLock")
}
