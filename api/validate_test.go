package api_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/api"
)

var limits = api.Limits{DefaultTTL: 30 * time.Second, MaxTTL: 10 * time.Minute, MaxWait: time.Minute}

func ptr[T any](v T) *T { return &v }

func TestValidateLockName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lock  string
		valid bool
	}{
		{"one letter", "a", true},
		{"every allowed character", "AZaz09._:-", true},
		{"three dots", "...", true},
		{"a dot", ".", false},
		{"two dots", "..", false},
		{"dots inside", "a..b", true},
		{"200 bytes", strings.Repeat("a", 200), true},
		{"empty", "", false},
		{"201 bytes", strings.Repeat("a", 201), false},
		{"space", "bad name", false},
		{"slash", "a/b", false},
		{"non-ASCII", "ü", false},
		{"braces", "a{b}", false},
		{"open brace", "{", false},
		{"NUL", "a\x00b", false},
		{"percent", "a%2Fb", false},
		{"tilde", "a~b", false},
		{"newline", "a\n", false},
		{"invalid UTF-8", "a\xff", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := api.ValidateLockName(tc.lock)
			if tc.valid {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

func TestValidateOwner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner string
		valid bool
	}{
		{"ASCII", "billing-worker-7", true},
		{"one character", "w", true},
		{"spaces are printable", "worker 7", true},
		{"128 two-byte characters", strings.Repeat("é", 128), true},
		{"128 four-byte characters", strings.Repeat("😀", 128), true},
		{"empty", "", false},
		{"129 characters", strings.Repeat("o", 129), false},
		{"129 two-byte characters", strings.Repeat("é", 129), false},
		{"BEL", "w\u0007", false},
		{"newline", "w\n1", false},
		{"tab", "w\t1", false},
		{"DEL", "w\x7f", false},
		{"NUL", "w\x00", false},
		{"zero-width space", "w\u200b", false},
		{"invalid UTF-8", "w\xff", false},
		{"truncated UTF-8", "w\xc3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := api.ValidateOwner(tc.owner)
			if tc.valid {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

func TestAcquireRequestValidate(t *testing.T) {
	maxTTL, maxWait := limits.MaxTTL.Milliseconds(), limits.MaxWait.Milliseconds()
	for _, tc := range []struct {
		name string
		req  api.AcquireRequest
		want api.Acquire // checked only when bad is nil
		bad  []string    // names of the invalid params, in order
	}{
		{"defaults", api.AcquireRequest{Owner: "w"},
			api.Acquire{Owner: "w", TTL: 30 * time.Second, Wait: 0, Watchdog: false}, nil},
		{"every field", api.AcquireRequest{Owner: "w", TTLms: ptr[int64](1500), Waitms: ptr[int64](2500), Watchdog: ptr(true)},
			api.Acquire{Owner: "w", TTL: 1500 * time.Millisecond, Wait: 2500 * time.Millisecond, Watchdog: true}, nil},
		{"watchdog false", api.AcquireRequest{Owner: "w", Watchdog: ptr(false)},
			api.Acquire{Owner: "w", TTL: 30 * time.Second}, nil},
		{"smallest values", api.AcquireRequest{Owner: "w", TTLms: ptr[int64](1), Waitms: ptr[int64](0)},
			api.Acquire{Owner: "w", TTL: time.Millisecond}, nil},
		{"largest values", api.AcquireRequest{Owner: "w", TTLms: ptr(maxTTL), Waitms: ptr(maxWait)},
			api.Acquire{Owner: "w", TTL: limits.MaxTTL, Wait: limits.MaxWait}, nil},
		{"owner empty", api.AcquireRequest{}, api.Acquire{}, []string{"owner"}},
		{"owner not printable", api.AcquireRequest{Owner: "w\u0007"}, api.Acquire{}, []string{"owner"}},
		{"ttl 0", api.AcquireRequest{Owner: "w", TTLms: ptr[int64](0)}, api.Acquire{}, []string{"ttl_ms"}},
		{"ttl negative", api.AcquireRequest{Owner: "w", TTLms: ptr[int64](-1)}, api.Acquire{}, []string{"ttl_ms"}},
		{"ttl above max", api.AcquireRequest{Owner: "w", TTLms: ptr(maxTTL + 1)}, api.Acquire{}, []string{"ttl_ms"}},
		{"ttl overflowing a duration", api.AcquireRequest{Owner: "w", TTLms: ptr[int64](math.MaxInt64)}, api.Acquire{}, []string{"ttl_ms"}},
		{"wait negative", api.AcquireRequest{Owner: "w", Waitms: ptr[int64](-1)}, api.Acquire{}, []string{"wait_ms"}},
		{"wait above max is capped", api.AcquireRequest{Owner: "w", Waitms: ptr(maxWait + 1)},
			api.Acquire{Owner: "w", TTL: 30 * time.Second, Wait: limits.MaxWait}, nil},
		{"wait overflowing a duration is capped", api.AcquireRequest{Owner: "w", Waitms: ptr[int64](math.MaxInt64)},
			api.Acquire{Owner: "w", TTL: 30 * time.Second, Wait: limits.MaxWait}, nil},
		{"every field invalid at once", api.AcquireRequest{Owner: "", TTLms: ptr[int64](0), Waitms: ptr[int64](-1)},
			api.Acquire{}, []string{"owner", "ttl_ms", "wait_ms"}},
		{"shared", api.AcquireRequest{Owner: "w", Mode: "shared"}, api.Acquire{Owner: "w", TTL: 30 * time.Second, Shared: true}, nil},
		{"exclusive", api.AcquireRequest{Owner: "w", Mode: "exclusive"}, api.Acquire{Owner: "w", TTL: 30 * time.Second}, nil},
		{"mode unknown", api.AcquireRequest{Owner: "w", Mode: "read"}, api.Acquire{}, []string{"mode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bad := tc.req.Validate(limits)
			if tc.bad == nil {
				require.Nil(t, bad, "a valid request yields nil, which the handler tests for")
				assert.Equal(t, tc.want, got)
				return
			}
			names := make([]string, len(bad))
			for i, p := range bad {
				names[i] = p.Name
				assert.NotEmpty(t, p.Reason, p.Name)
			}
			assert.Equal(t, tc.bad, names)
		})
	}
}

// TestWaitIsCappedEverywhere: a lock's, a semaphore's and a multi-lock's wait_ms above the
// configured maximum waits that maximum (a long-poll convention), and a negative one is refused.
func TestWaitIsCappedEverywhere(t *testing.T) {
	over := ptr(limits.MaxWait.Milliseconds() + 1)
	lock, bad := api.AcquireRequest{Owner: "w", Waitms: over}.Validate(limits)
	require.Nil(t, bad)
	assert.Equal(t, limits.MaxWait, lock.Wait)
	sem, bad := api.SemaphoreAcquireRequest{Owner: "w", Permits: ptr[int64](2), Waitms: over}.Validate(limits)
	require.Nil(t, bad)
	assert.Equal(t, limits.MaxWait, sem.Wait)
	group, bad := api.MultiLockRequest{Owner: "w", Locks: []string{"a", "b"}, Waitms: over}.Validate(limits)
	require.Nil(t, bad)
	assert.Equal(t, limits.MaxWait, group.Wait)

	_, bad = api.SemaphoreAcquireRequest{Owner: "w", Permits: ptr[int64](2), Waitms: ptr[int64](-1)}.Validate(limits)
	require.Len(t, bad, 1)
	assert.Equal(t, "wait_ms", bad[0].Name)
	assert.Contains(t, bad[0].Reason, "-1")
	_, bad = api.MultiLockRequest{Owner: "w", Locks: []string{"a", "b"}, Waitms: ptr[int64](-1)}.Validate(limits)
	require.Len(t, bad, 1)
	assert.Equal(t, "wait_ms", bad[0].Name)
}

func TestAcquireRequestValidateReasonNamesTheLimit(t *testing.T) {
	_, bad := api.AcquireRequest{Owner: "w", TTLms: ptr[int64](600001)}.Validate(limits)
	require.Len(t, bad, 1)
	assert.Contains(t, bad[0].Reason, "600000", "the reason tells the configured maximum")
	assert.Contains(t, bad[0].Reason, "600001", "the reason tells the rejected value")
}

func TestRenewRequestValidate(t *testing.T) {
	maxTTL := limits.MaxTTL.Milliseconds()
	for _, tc := range []struct {
		name  string
		ttlms *int64
		want  time.Duration
		valid bool
	}{
		{"absent keeps the lease's TTL", nil, 0, true},
		{"1 ms", ptr[int64](1), time.Millisecond, true},
		{"the maximum", ptr(maxTTL), limits.MaxTTL, true},
		{"0", ptr[int64](0), 0, false},
		{"negative", ptr[int64](-5), 0, false},
		{"above the maximum", ptr(maxTTL + 1), 0, false},
		{"overflowing a duration", ptr[int64](math.MaxInt64), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bad := api.RenewRequest{TTLms: tc.ttlms}.Validate(limits)
			if tc.valid {
				require.Nil(t, bad)
				assert.Equal(t, tc.want, got)
				return
			}
			require.Len(t, bad, 1)
			assert.Equal(t, "ttl_ms", bad[0].Name)
			assert.NotEmpty(t, bad[0].Reason)
		})
	}
}

func TestTimestampMarshal(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"UTC", time.Date(2026, 11, 21, 8, 58, 14, 152_000_000, time.UTC), `"2026-11-21T08:58:14.152Z"`},
		{"whole second keeps its milliseconds", time.Date(2026, 11, 21, 8, 58, 14, 0, time.UTC), `"2026-11-21T08:58:14.000Z"`},
		{"sub-millisecond digits are cut", time.Date(2026, 11, 21, 8, 58, 14, 152_999_999, time.UTC), `"2026-11-21T08:58:14.152Z"`},
		{"other zone is converted to UTC", time.Date(2026, 11, 21, 10, 58, 14, 152_000_000, time.FixedZone("CEST", 2*3600)), `"2026-11-21T08:58:14.152Z"`},
		{"negative offset crosses midnight", time.Date(2026, 11, 20, 23, 0, 0, 1_000_000, time.FixedZone("", -10*3600)), `"2026-11-21T09:00:00.001Z"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(api.Timestamp(tc.at))
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(b))

			var back api.Timestamp
			require.NoError(t, json.Unmarshal(b, &back))
			assert.True(t, time.Time(back).Equal(tc.at.Truncate(time.Millisecond)), "round trip gave %v", time.Time(back))
		})
	}
}

func TestTimestampInGrant(t *testing.T) {
	b, err := json.Marshal(api.Grant{ExpiresAt: api.Timestamp(time.Date(2026, 11, 21, 8, 58, 14, 152_000_000, time.UTC))})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"expires_at":"2026-11-21T08:58:14.152Z"`)
}

// TestMultiLockQueueTicket: a multi-lock request carries a queue ticket as a lock's does: waiting
// requests only, at most MaxTicketLen bytes.
func TestMultiLockQueueTicket(t *testing.T) {
	group, bad := api.MultiLockRequest{Owner: "w", Locks: []string{"a", "b"}, Waitms: ptr[int64](1000), QueueTicket: "p.s"}.Validate(limits)
	require.Nil(t, bad)
	assert.Equal(t, "p.s", group.QueueTicket)
	for _, r := range []api.MultiLockRequest{
		{Owner: "w", Locks: []string{"a", "b"}, QueueTicket: "p.s"},
		{Owner: "w", Locks: []string{"a", "b"}, Waitms: ptr[int64](1000), QueueTicket: strings.Repeat("x", api.MaxTicketLen+1)},
	} {
		_, bad := r.Validate(limits)
		require.Len(t, bad, 1)
		assert.Equal(t, "queue_ticket", bad[0].Name)
	}
}
