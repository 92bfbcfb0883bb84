package testkit

import (
	"bytes"
	"os/exec"
	"sync"
	"testing"
)

// DebianTool returns the path of the first of names on PATH, failing t (never skipping) when none
// is there, with the Debian package that provides it: ./scripts/test installs those.
func DebianTool(t *testing.T, pkg string, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("%s not found on PATH: install Debian's %s package (./scripts/test does)", names[0], pkg)
	return ""
}

// LockedBuffer collects a process's output, written from the goroutines os/exec copies with.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it is safe for concurrent use.
func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
