package auth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Store serves the Config of an auth file and reloads it: on Reload (SIGHUP), and when the
// content of the file, or of the JWKS or PEM file its "jwt" member names, changes (Watch polls
// them). A file that fails to load leaves the last
// good Config in service and is logged once per change. Safe for concurrent use.
type Store struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[Config]

	mu      sync.Mutex // serialises reloads
	loaded  stamps     // the files' stamps when cur was read
	failing bool       // the files at failed have been tried, and the error logged
	failed  stamps
}

// stamps are the stamps of the auth file and of the key file its Config names (zero without one).
type stamps [2]stamp

// stampsOf stamps path and keyFile ("" for none); an error of either is returned.
func stampsOf(path, keyFile string) (stamps, error) {
	var st stamps
	var err error
	if st[0], err = stampOf(path); err != nil {
		return stamps{}, err
	}
	if keyFile != "" {
		if st[1], err = stampOf(keyFile); err != nil {
			return stamps{}, err
		}
	}
	return st, nil
}

// stamp is what tells a file's change: the digest of its content (zero when it cannot be read).
// Not its modification time and size: a replacement renamed into place within the file system's
// timestamp granularity can keep both.
type stamp [sha256.Size]byte

func stampOf(path string) (stamp, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stamp{}, err
	}
	return sha256.Sum256(b), nil
}

// Open loads the auth file at path; an error here is a start-up error. log (default
// slog.Default()) gets the reloads and their failures.
func Open(path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{path: path, log: log}
	st, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("LEASEGATE_AUTH_FILE %s: %w", path, err)
	}
	s.loaded = st
	return s, nil
}

// load reads the files and puts their Config in service, returning their stamps taken before
// the read: files replaced after the stat differ from the stamps kept, so the next check reads
// them again.
func (s *Store) load() (stamps, error) {
	var st stamps
	var err error
	if st[0], err = stampOf(s.path); err != nil {
		return stamps{}, err
	}
	c, err := Load(s.path)
	if err != nil {
		return stamps{}, err
	}
	if kf := c.KeyFile(); kf != "" {
		if st[1], err = stampOf(kf); err != nil {
			return stamps{}, err
		}
	}
	s.cur.Store(c)
	return st, nil
}

// Config returns the Config in service.
func (s *Store) Config() *Config { return s.cur.Load() }

// Authenticate is Config().Authenticate: the principal of key under the Config in service.
func (s *Store) Authenticate(key string) (*Principal, error) { return s.cur.Load().Authenticate(key) }

// AuthenticateCertificate is Config().AuthenticateCertificate under the Config in service.
func (s *Store) AuthenticateCertificate(subject string) (*Principal, error) {
	return s.cur.Load().AuthenticateCertificate(subject)
}

// Reload re-reads the file now (SIGHUP). It returns the error that kept the last good Config in
// service, after logging it.
func (s *Store) Reload() error { return s.reload(true) }

// reload re-reads the file: always when forced, else only when its stamp changed since the last
// read or the last failure.
func (s *Store) reload(force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := stampsOf(s.path, s.cur.Load().KeyFile())
	if !force && (err == nil && st == s.loaded || s.failing && st == s.failed) {
		return nil
	}
	if err == nil {
		var loaded stamps
		if loaded, err = s.load(); err == nil {
			st = loaded
		}
	}
	if err != nil {
		if force || !s.failing || st != s.failed {
			s.log.Error("auth file reload failed; still serving the last good one", "auth_file", s.path, "err", err)
		}
		s.failing, s.failed = true, st
		return err
	}
	s.loaded, s.failing = st, false
	s.log.Info("auth file reloaded", "auth_file", s.path, "principals", len(s.cur.Load().Principals))
	return nil
}

// Watch reloads the file when it changes (checked every interval) and on every value from hup,
// until ctx ends. It is meant to run on a goroutine of its own, which its caller owns.
func (s *Store) Watch(ctx context.Context, interval time.Duration, hup <-chan os.Signal) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = s.reload(true)
		case <-t.C:
			_ = s.reload(false)
		}
	}
}
