package tests

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSmoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.client.Do(http.MethodPost, "/locks/orders", nil, acquireBody("w1", 30000))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	t.Logf("%s", r.Body)
	tok := r.Str("token")
	r2 := e.client.Do(http.MethodPost, "/locks/orders", nil, acquireBody("w2", 30000))
	assert.Equal(t, http.StatusConflict, r2.Status)
	t.Logf("%s %v", r2.Body, r2.Header)
	r3 := e.client.Do(http.MethodGet, "/locks/orders", tokenHeader(tok), "")
	t.Logf("%s", r3.Body)
	r4 := e.client.Do(http.MethodDelete, "/locks/orders", tokenHeader(tok), "")
	assert.Equal(t, http.StatusOK, r4.Status)
	t.Logf("%s", r4.Body)
}
