package handlers

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQuotaRateIsATokenBucketPerPrincipal(t *testing.T) {
	q := newQuotas(Quotas{Rate: 2, Burst: 3})
	for range 3 {
		require.NoError(t, q.allow("a"), "the burst")
	}
	err := q.allow("a")
	var qe *quotaError
	require.True(t, errors.As(err, &qe), "the fourth at once is over: %v", err)
	assert.Greater(t, qe.retryAfter, time.Duration(0))
	assert.LessOrEqual(t, qe.retryAfter, 500*time.Millisecond, "a token comes every 500 ms")
	assert.NoError(t, q.allow("b"), "another principal has its own bucket")
	assert.NoError(t, q.allow(""), "no authentication: no per-principal limit")
}

func TestQuotaParkedCountsUntilDone(t *testing.T) {
	q := newQuotas(Quotas{Parked: 2})
	done1, err := q.park("a")
	require.NoError(t, err)
	done2, err := q.park("a")
	require.NoError(t, err)
	_, err = q.park("a")
	var qe *quotaError
	require.True(t, errors.As(err, &qe), "a third parked request is over: %v", err)
	_, err = q.park("b")
	assert.NoError(t, err, "another principal")
	done1()
	done1() // twice is once
	done3, err := q.park("a")
	require.NoError(t, err, "one left: room for one more")
	done2()
	done3()
	assert.Equal(t, 0, q.by["a"].parked)
}

func TestQuotaOffByDefault(t *testing.T) {
	q := newQuotas(Quotas{})
	for range 1000 {
		require.NoError(t, q.allow("a"))
	}
	var nilQuotas *quotas
	assert.NoError(t, nilQuotas.allow("a"))
	done, err := nilQuotas.park("a")
	require.NoError(t, err)
	done()
}
