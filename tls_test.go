package main

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
)

// TestCertReloader: a changed pair is taken on the next check, a broken or missing one keeps the
// last good pair in service and is logged once per change, and a first load that fails is an error.
func TestCertReloader(t *testing.T) {
	dir := t.TempDir()
	ca, pair, err := harness.WriteServerCertificates(dir)
	require.NoError(t, err)
	var logs bytes.Buffer
	r, err := newCertReloader(pair.CertFile, pair.KeyFile, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)

	// served makes a check due (as if certCheckInterval had passed) and returns the serial served.
	served := func() *big.Int {
		t.Helper()
		r.mu.Lock()
		r.checked = r.checked.Add(-certCheckInterval)
		r.mu.Unlock()
		c, err := r.GetCertificate(&tls.ClientHelloInfo{})
		require.NoError(t, err)
		return c.Leaf.SerialNumber
	}
	replace := func() *big.Int {
		next, err := ca.Issue(t.TempDir(), "next", "127.0.0.1")
		require.NoError(t, err)
		require.NoError(t, os.Rename(next.CertFile, pair.CertFile))
		require.NoError(t, os.Rename(next.KeyFile, pair.KeyFile))
		return next.Serial
	}
	assert.Equal(t, pair.Serial, served())

	second := replace()
	c, err := r.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	assert.Equal(t, pair.Serial, c.Leaf.SerialNumber, "not looked at again within the check interval")
	assert.Equal(t, second, served())
	assert.Equal(t, 1, strings.Count(logs.String(), "TLS certificate reloaded"))

	const failed = "TLS certificate reload failed"
	require.NoError(t, os.WriteFile(pair.KeyFile, []byte("garbage"), 0o600))
	assert.Equal(t, second, served())
	assert.Equal(t, second, served())
	assert.Equal(t, 1, strings.Count(logs.String(), failed), "logged once per change")

	require.NoError(t, os.Remove(pair.KeyFile))
	assert.Equal(t, second, served())
	assert.Equal(t, second, served())
	assert.Equal(t, 2, strings.Count(logs.String(), failed), "a missing file is a change too")

	third := replace()
	assert.Equal(t, third, served())
	assert.Equal(t, 2, strings.Count(logs.String(), "TLS certificate reloaded"))

	garbage := filepath.Join(dir, "garbage.key")
	require.NoError(t, os.WriteFile(garbage, []byte("garbage"), 0o600))
	_, err = newCertReloader(pair.CertFile, garbage, slog.New(slog.NewTextHandler(&logs, nil)))
	assert.ErrorContains(t, err, "LEASEGATE_TLS_KEY_FILE")
}
