package lockcore

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// newInternalService starts a redis-server and a Service on it, closed when t ends.
func newInternalService(t *testing.T) (*harness.Redis, *Service, rueidis.Client) {
	t.Helper()
	return newInternalServiceWith(t, Options{})
}

// newInternalServiceWith is newInternalService with opts (its key prefix is the test's own).
func newInternalServiceWith(t *testing.T, opts Options) (*harness.Redis, *Service, rueidis.Client) {
	t.Helper()
	r := harness.NewRedis(t, harness.RedisOptions{})
	client, err := rueidis.NewClient(ClientOption(r.Addr, ""))
	require.NoError(t, err)
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	opts.KeyPrefix = harness.RandomPrefix()
	s, err := New(client, tokens, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(); client.Close() })
	return r, s, client
}

// TestSweepComparesDueTimesWithTheRedisClock checks the sweep's idle check against Redis's own
// clock: a renewal due by Redis time is due, one a minute ahead of it is not. (The gateway's clock
// plays no part, so a gateway running behind Redis cannot delay renewals; this host cannot skew
// one clock against the other, so the test pins the comparison instead.)
func TestSweepComparesDueTimesWithTheRedisClock(t *testing.T) {
	r, s, client := newInternalService(t)
	ctx := context.Background()

	redisNowMs := func() int64 {
		v, err := client.Do(ctx, client.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		sec, _ := strconv.ParseInt(v[0], 10, 64)
		usec, _ := strconv.ParseInt(v[1], 10, 64)
		return sec*1000 + usec/1000
	}
	assert.Equal(t, [2]bool{}, s.watchdog.anyDue(ctx, s.dep.copies()[0], s.watchdog.shards[0]), "empty schedules have nothing due")
	r.MustDo(t, "ZADD", s.watchdog.shards[0].leases, strconv.FormatInt(redisNowMs()+60000, 10), "later\nlease")
	r.MustDo(t, "ZADD", s.watchdog.shards[0].groups, strconv.FormatInt(redisNowMs()+60000, 10), "m-later\nx\na\nb")
	assert.Equal(t, [2]bool{}, s.watchdog.anyDue(ctx, s.dep.copies()[0], s.watchdog.shards[0]), "a renewal a minute ahead of Redis time is not due")
	r.MustDo(t, "ZADD", s.watchdog.shards[0].leases, strconv.FormatInt(redisNowMs()-1, 10), "now\nlease")
	assert.Equal(t, [2]bool{true, false}, s.watchdog.anyDue(ctx, s.dep.copies()[0], s.watchdog.shards[0]), "a renewal due by Redis time is due")
	r.MustDo(t, "ZADD", s.watchdog.shards[0].groups, strconv.FormatInt(redisNowMs()-1, 10), "m-now\nx\na\nb")
	assert.Equal(t, [2]bool{true, true}, s.watchdog.anyDue(ctx, s.dep.copies()[0], s.watchdog.shards[0]), "a multi-lock's renewal due by Redis time is due")
}

// TestSweepKeepsARenewalBroughtForward replays the race of a sweep with a renew that shortens a
// watchdog lease's TTL: the sweep claims the lease, the renew reschedules it sooner, then the
// sweep writes back the due time it computed from the old TTL. The earlier, rescheduled time
// must survive, or the lease would lapse before its next renewal.
func TestSweepKeepsARenewalBroughtForward(t *testing.T) {
	_, s, client := newInternalService(t)
	s.Close() // no sweeps of its own: this test plays the sweep (Close twice is harmless)
	ctx := context.Background()
	schedule := func(args ...string) []string {
		v, err := scripts.watchdogSchedule.lua.Exec(ctx, client, []string{s.watchdog.shards[0].leases}, args).AsStrSlice()
		require.NoError(t, err)
		return v
	}
	score := func(member string) int64 {
		v, err := client.Do(ctx, client.B().Zscore().Key(s.watchdog.shards[0].leases).Member(member).Build()).AsInt64()
		require.NoError(t, err)
		return v
	}
	client.Do(ctx, client.B().Zadd().Key(s.watchdog.shards[0].leases).ScoreMember().ScoreMember(1, "l\nraced").ScoreMember(1, "l\nplain").Build())
	claimed := schedule("claim", "250", "10")
	require.ElementsMatch(t, []string{"l\nraced", "l\nplain"}, claimed[1:])
	_, err := scripts.watchdogSchedule.lua.Exec(ctx, client, []string{s.watchdog.shards[0].leases}, []string{"reschedule", "l\nraced", "1000"}).ToArray()
	require.NoError(t, err)
	rescheduled := score("l\nraced")
	far := strconv.FormatInt(rescheduled+60000, 10)
	require.NoError(t, scripts.watchdogSchedule.lua.Exec(ctx, client, []string{s.watchdog.shards[0].leases},
		[]string{"record", claimed[0], "l\nraced", far, "l\nplain", far}).Error())
	assert.Equal(t, rescheduled, score("l\nraced"), "the renewal brought forward is kept")
	assert.Equal(t, rescheduled+60000, score("l\nplain"), "an untouched claim gets the sweep's due time")
}
