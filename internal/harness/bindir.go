package harness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A test process's gateway binary is some 40 MB. Its directory, leasegate-bin-* under
// os.TempDir(), holds an owner lock file that the process locks (flock) for as long as it lives:
// the kernel drops the lock when the process ends, however it ends, so a directory whose lock
// nobody holds is a leftover. Locks work across processes of any user or PID namespace sharing the
// file system, which process IDs would not.
const (
	binDirPrefix  = "leasegate-bin-"
	ownerLockName = "owner.lock"
	// staleAfter spares a directory another process has just made and not yet locked.
	staleAfter = time.Minute
	// legacyStaleAfter is for directories without a lock file, made before it existed: no test
	// process lives that long.
	legacyStaleAfter = time.Hour
)

// ownerLock is this process's locked owner file, held open until releaseBinaryDir.
var ownerLock *os.File

// claimBinaryDir makes a fresh directory for this process's gateway binary and locks its owner
// file for the life of the process.
func claimBinaryDir() (string, error) {
	dir, err := os.MkdirTemp("", binDirPrefix)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(filepath.Join(dir, ownerLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	ownerLock = f
	return dir, nil
}

// releaseBinaryDir unlocks this process's owner file (closing it drops the lock).
func releaseBinaryDir() {
	if ownerLock != nil {
		_ = ownerLock.Close()
		ownerLock = nil
	}
}

// removeStaleBinaryDirs removes the binary directories of test processes that ended without
// removing theirs: their owner lock is free and they were last changed over staleAfter ago (or,
// without a lock file, over legacyStaleAfter ago). It removes what it can and reports nothing:
// a leftover it cannot remove costs disk space, not a test.
func removeStaleBinaryDirs() {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	now := time.Now()
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), binDirPrefix) {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		info, err := e.Info()
		if err != nil {
			continue
		}
		age := now.Sub(info.ModTime())
		f, err := os.OpenFile(filepath.Join(dir, ownerLockName), os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			if age > legacyStaleAfter {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		if err != nil {
			continue
		}
		if age > staleAfter && syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(dir)
		}
		f.Close()
	}
}
