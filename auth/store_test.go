package auth_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
)

// syncBuffer is a log sink safe for the watcher's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeFile replaces path's contents at once, as deployments do (a file renamed into place, a
// Kubernetes volume's symlink swap), keeping its modification time: a change is told by content.
// Not in place: a poll between os.WriteFile's truncation and its write reads an empty file, a
// change of its own that fails to load and is logged, which a busy machine makes likely.
func writeFile(t *testing.T, path string, data []byte, mtime time.Time) {
	t.Helper()
	next := path + ".next"
	require.NoError(t, os.WriteFile(next, data, 0o600))
	require.NoError(t, os.Chtimes(next, mtime, mtime))
	require.NoError(t, os.Rename(next, path))
}

func TestStoreReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	k1, h1 := auth.NewKey()
	k2, h2 := auth.NewKey()
	now := time.Now()
	writeFile(t, path, file(principal("one", h1, `"*"`, `"lock"`)), now)
	var logs syncBuffer
	s, err := auth.Open(path, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	_, err = s.Authenticate(k1)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, 5*time.Millisecond, hup) }()
	defer func() { cancel(); <-done }()

	// A change is picked up by polling.
	writeFile(t, path, file(principal("two", h2, `"*"`, `"lock"`)), now.Add(time.Second))
	require.Eventually(t, func() bool { _, err := s.Authenticate(k2); return err == nil }, 5*time.Second, 5*time.Millisecond)
	_, err = s.Authenticate(k1)
	assert.ErrorIs(t, err, auth.ErrUnauthenticated)

	// A broken file keeps the last good one, and is logged once.
	writeFile(t, path, []byte(`{"principals": [`), now)
	require.Eventually(t, func() bool { return bytes.Count([]byte(logs.String()), []byte("reload failed")) == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err = s.Authenticate(k2)
	assert.NoError(t, err)
	hup <- os.Interrupt // a forced reload tries again, and logs again
	require.Eventually(t, func() bool { return bytes.Count([]byte(logs.String()), []byte("reload failed")) == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.Error(t, s.Reload())
	_, err = s.Authenticate(k2)
	assert.NoError(t, err)

	// A removed file too.
	require.NoError(t, os.Remove(path))
	assert.Error(t, s.Reload())
	_, err = s.Authenticate(k2)
	assert.NoError(t, err)

	// Fixed: back in service on the next reload.
	writeFile(t, path, file(principal("one", h1, `"*"`, `"lock"`)), now)
	require.NoError(t, s.Reload())
	_, err = s.Authenticate(k1)
	assert.NoError(t, err)
}

func TestOpenRefusesBrokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	_, err := auth.Open(path, nil)
	assert.ErrorContains(t, err, "LEASEGATE_AUTH_FILE")
	require.NoError(t, os.WriteFile(path, []byte(`{"principals":[]}`), 0o600))
	_, err = auth.Open(path, nil)
	assert.ErrorContains(t, err, "empty")
}

// TestStoreReloadsOnHangup: SIGHUP reloads at once, whatever the polling interval.
func TestStoreReloadsOnHangup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	k1, h1 := auth.NewKey()
	k2, h2 := auth.NewKey()
	now := time.Now()
	writeFile(t, path, file(principal("one", h1, `"*"`, `"lock"`)), now)
	s, err := auth.Open(path, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, time.Hour, hup) }()
	defer func() { cancel(); <-done }()

	writeFile(t, path, file(principal("two", h2, `"*"`, `"lock"`)), now)
	hup <- os.Interrupt
	require.Eventually(t, func() bool { _, err := s.Authenticate(k2); return err == nil }, 5*time.Second, 5*time.Millisecond)
	_, err = s.Authenticate(k1)
	assert.ErrorIs(t, err, auth.ErrUnauthenticated)
}
