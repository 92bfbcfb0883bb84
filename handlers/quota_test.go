package handlers

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
)

// principal is a principal named name with quotas of its own.
func principal(name string, own auth.Quotas) *auth.Principal {
	return &auth.Principal{Name: name, Quotas: own}
}

func ptr2[T any](v T) *T { return &v }

func TestQuotaRateIsATokenBucketPerPrincipal(t *testing.T) {
	q := newQuotas(Quotas{Rate: 2, Burst: 3})
	a := principal("a", auth.Quotas{})
	for range 3 {
		require.NoError(t, q.allow(a), "the burst")
	}
	err := q.allow(a)
	var qe *quotaError
	require.True(t, errors.As(err, &qe), "the fourth at once is over: %v", err)
	assert.Greater(t, qe.retryAfter, time.Duration(0))
	assert.LessOrEqual(t, qe.retryAfter, 500*time.Millisecond, "a token comes every 500 ms")
	assert.NoError(t, q.allow(principal("b", auth.Quotas{})), "another principal has its own bucket")
	assert.NoError(t, q.allow(nil), "no authentication: no per-principal limit")
}

func TestQuotaParkedCountsUntilDone(t *testing.T) {
	q := newQuotas(Quotas{Parked: 2})
	a := principal("a", auth.Quotas{})
	done1, err := q.admitWait(a)
	require.NoError(t, err)
	done2, err := q.admitWait(a)
	require.NoError(t, err)
	_, err = q.admitWait(a)
	var qe *quotaError
	require.True(t, errors.As(err, &qe), "a third parked request is over: %v", err)
	_, err = q.admitWait(principal("b", auth.Quotas{}))
	assert.NoError(t, err, "another principal")
	done1()
	done1() // twice is once
	done3, err := q.admitWait(a)
	require.NoError(t, err, "one left: room for one more")
	done2()
	done3()
	assert.Equal(t, 0, q.by["a"].parked)
}

func TestQuotaOffByDefault(t *testing.T) {
	q := newQuotas(Quotas{})
	a := principal("a", auth.Quotas{})
	for range 1000 {
		require.NoError(t, q.allow(a))
	}
	var nilQuotas *quotas
	assert.NoError(t, nilQuotas.allow(a))
	done, err := nilQuotas.admitWait(a)
	require.NoError(t, err)
	done()
}

// TestQuotaOwnReplacesDefault: a principal's own quotas replace the defaults, 0 meaning none, and
// a reload that changes them takes effect on the principal's next request.
func TestQuotaOwnReplacesDefault(t *testing.T) {
	q := newQuotas(Quotas{Rate: 1, Burst: 1, Parked: 1})

	unlimited := principal("batch", auth.Quotas{Rate: ptr2(0.0), Parked: ptr2(0)})
	for range 100 {
		require.NoError(t, q.allow(unlimited))
		_, err := q.admitWait(unlimited)
		require.NoError(t, err)
	}

	fast := principal("web", auth.Quotas{Rate: ptr2(1000.0)}) // burst: its own rate's default, 1000
	for range 500 {
		require.NoError(t, q.allow(fast))
	}
	_, err := q.admitWait(fast)
	require.NoError(t, err)
	_, err = q.admitWait(fast)
	assert.Error(t, err, "parked keeps the default of 1")

	reloaded := principal("web", auth.Quotas{Rate: ptr2(1.0), Burst: ptr2(1)})
	require.NoError(t, q.allow(reloaded))
	assert.Error(t, q.allow(reloaded), "the reloaded rate and burst apply at once")

	assert.Equal(t, 0, heldCap(nil))
	assert.Equal(t, 0, heldCap(principal("x", auth.Quotas{})))
	assert.Equal(t, -1, heldCap(principal("x", auth.Quotas{Held: ptr2(0)})))
	assert.Equal(t, 7, heldCap(principal("x", auth.Quotas{Held: ptr2(7)})))
}
