package lockcore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// TestHeldCountOutlastsTheHold: a hold's count ends no earlier than the hold can: a watchdog
// lease renewed (or re-entered) with a TTL beyond its max hold is counted to that TTL's end, and
// a TTL lease's renewal moves its count's end on; the count is never shortened.
func TestHeldCountOutlastsTheHold(t *testing.T) {
	r := harness.NewRedis(t, harness.RedisOptions{})
	client, err := rueidis.NewClient(ClientOption(r.Addr, ""))
	require.NoError(t, err)
	tokens, err := NewTokens([]byte("0123456789abcdef0123"))
	require.NoError(t, err)
	s, err := New(client, tokens, Options{KeyPrefix: harness.RandomPrefix(), MaxHeld: 10})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(); client.Close() })
	ctx := context.Background()

	countEnd := func(g Grant) time.Time {
		t.Helper()
		score, err := client.Do(ctx, client.B().Zscore().Key(s.space.prefix+"held:{p}").Member(heldMember(g.Ref(), g.ID)).Build()).AsInt64()
		require.NoError(t, err)
		return time.UnixMilli(score)
	}
	counted := func() int64 {
		t.Helper()
		n, err := client.Do(ctx, client.B().Zcard().Key(s.space.prefix+"held:{p}").Build()).AsInt64()
		require.NoError(t, err)
		return n
	}

	wd, err := s.Acquire(ctx, AcquireRequest{Lock: "wd", Owner: "o", TTL: time.Second, Watchdog: true, MaxHold: 2 * time.Second, Principal: "p"})
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(4*time.Second), countEnd(wd), time.Second, "max hold + last TTL + slack")
	_, err = s.Renew(ctx, wd.Ref(), wd.Token, 10*time.Minute)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute+time.Second), countEnd(wd), time.Second, "renewed past its max hold")
	_, err = s.Renew(ctx, wd.Ref(), wd.Token, time.Second)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute+time.Second), countEnd(wd), time.Second, "never shortened")

	l, err := s.Acquire(ctx, AcquireRequest{Lock: "ttl", Owner: "o", TTL: time.Second, Principal: "p"})
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(2*time.Second), countEnd(l), time.Second)
	_, err = s.Acquire(ctx, AcquireRequest{Lock: "ttl", Owner: "o", TTL: time.Minute, Token: l.Token, Principal: "p"})
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Minute+time.Second), countEnd(l), time.Second, "a re-entry with a longer TTL")

	_, err = s.Release(ctx, ReleaseRequest{Ref: l.Ref(), Token: l.Token})
	require.NoError(t, err)
	assert.Equal(t, int64(2), counted(), "one of the re-entered lease's two holds released: both leases still count")
	_, err = s.Release(ctx, ReleaseRequest{Ref: l.Ref(), Token: l.Token})
	require.NoError(t, err)
	assert.Equal(t, int64(1), counted(), "its last hold released: only the watchdog lease counts")
}
