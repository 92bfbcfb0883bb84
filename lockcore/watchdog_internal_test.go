package lockcore

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/tests/harness"
)

// TestSweepComparesDueTimesWithTheRedisClock checks the sweep's idle check against Redis's own
// clock: a renewal due by Redis time is due, one a minute ahead of it is not. (The gateway's clock
// plays no part, so a gateway running behind Redis cannot delay renewals; this host cannot skew
// one clock against the other, so the test pins the comparison instead.)
func TestSweepComparesDueTimesWithTheRedisClock(t *testing.T) {
	r := harness.NewRedis(t, harness.RedisOptions{})
	client, err := rueidis.NewClient(ClientOption(r.Addr, ""))
	require.NoError(t, err)
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	s, err := New(client, tokens, Options{KeyPrefix: harness.RandomPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(); client.Close() })
	ctx := context.Background()

	redisNowMs := func() int64 {
		v, err := client.Do(ctx, client.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		sec, _ := strconv.ParseInt(v[0], 10, 64)
		usec, _ := strconv.ParseInt(v[1], 10, 64)
		return sec*1000 + usec/1000
	}
	assert.False(t, s.anyDue(ctx), "an empty schedule has nothing due")
	r.MustDo(t, "ZADD", s.schedule, strconv.FormatInt(redisNowMs()+60000, 10), "later\nlease")
	assert.False(t, s.anyDue(ctx), "a renewal a minute ahead of Redis time is not due")
	r.MustDo(t, "ZADD", s.schedule, strconv.FormatInt(redisNowMs()-1, 10), "now\nlease")
	assert.True(t, s.anyDue(ctx), "a renewal due by Redis time is due")
}
