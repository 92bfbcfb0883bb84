package harness

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedLockRig is n independent redis-server masters (no replication, no persistence) on loopback
// ports of their own, for a gateway in RedLock mode (LEASEGATE_REDLOCK_URLS = URLs()), every one
// stopped when the test ends. A master keeps its port across Kill and RestartEmpty. Its methods
// are safe for concurrent use and return errors instead of failing the test, so goroutines may
// call them too.
type RedLockRig struct {
	masters []*Redis
}

// NewRedLockRig starts n masters for t and stops them when t ends (logging each one's log tail
// when t failed).
func NewRedLockRig(t testing.TB, n int) *RedLockRig {
	t.Helper()
	if n < 1 {
		t.Fatalf("redlock rig: %d masters", n)
	}
	rig := &RedLockRig{masters: make([]*Redis, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := t.TempDir()
		wg.Go(func() { rig.masters[i], errs[i] = StartRedis(dir, RedisOptions{}) })
	}
	wg.Wait()
	started := slices.DeleteFunc(slices.Clone(rig.masters), func(r *Redis) bool { return r == nil })
	t.Cleanup(func() { stopAll(t, started) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("redlock rig: start master %d: %v", i, err)
		}
	}
	return rig
}

// URLs returns the masters as LEASEGATE_REDLOCK_URLS wants them:
// "redis://127.0.0.1:P1,redis://127.0.0.1:P2,...", in Masters order.
func (r *RedLockRig) URLs() string {
	urls := make([]string, len(r.masters))
	for i, m := range r.masters {
		urls[i] = "redis://" + m.Addr
	}
	return strings.Join(urls, ",")
}

// Masters returns the masters, in URLs order.
func (r *RedLockRig) Masters() []*Redis { return slices.Clone(r.masters) }

// Master returns master i (0-based, in URLs order).
func (r *RedLockRig) Master(i int) *Redis { return r.masters[i] }

// Kill stops masters idx at once (SIGKILL), as a crash would, and waits until they are gone.
func (r *RedLockRig) Kill(idx ...int) error {
	for _, i := range idx {
		if err := r.masters[i].Kill(); err != nil {
			return fmt.Errorf("kill master %d (%s): %w", i, r.masters[i].Addr, err)
		}
	}
	return nil
}

// RestartEmpty starts masters idx again on their ports, killing (SIGKILL) any that still runs
// first. A harness server keeps no data, so each comes back empty, with a new run_id.
func (r *RedLockRig) RestartEmpty(idx ...int) error {
	for _, i := range idx {
		m := r.masters[i]
		if err := m.Kill(); err != nil {
			return fmt.Errorf("kill master %d (%s): %w", i, m.Addr, err)
		}
		if err := m.Restart(); err != nil {
			return fmt.Errorf("restart master %d (%s): %w", i, m.Addr, err)
		}
	}
	return nil
}

// RunID returns master i's run_id (INFO server), which changes on every restart.
func (r *RedLockRig) RunID(i int) (string, error) {
	info, err := r.masters[i].Do("INFO", "server")
	if err != nil {
		return "", err
	}
	if id := infoField(info, "run_id"); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("master %d: no run_id in INFO server", i)
}

// Stall makes master i stop answering for d (DEBUG SLEEP, which the harness's servers allow from
// loopback) and returns once it has stopped answering. The returned channel receives the DEBUG
// SLEEP's outcome (nil when its reply came, i.e. the master answers again) and is then closed.
func (r *RedLockRig) Stall(i int, d time.Duration) (<-chan error, error) {
	m := r.masters[i]
	conn, err := net.DialTimeout("tcp", m.Addr, time.Second)
	if err != nil {
		return nil, fmt.Errorf("stall master %d: %w", i, err)
	}
	_ = conn.SetDeadline(time.Now().Add(d + 10*time.Second))
	var b strings.Builder
	writeCommand(&b, []string{"DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)})
	if _, err := conn.Write([]byte(b.String())); err != nil {
		conn.Close()
		return nil, fmt.Errorf("stall master %d: %w", i, err)
	}
	done := make(chan error, 1)
	go func() {
		defer close(done)
		defer conn.Close()
		_, err := readReply(bufio.NewReader(conn))
		done <- err
	}()
	// The sleep has begun once a PING goes unanswered for a while (or the sleep already ended).
	err = pollUntil(d, 5*time.Millisecond, func() error {
		if !answers(m.Addr, 50*time.Millisecond) {
			return nil
		}
		return fmt.Errorf("master %d still answers PING", i)
	})
	if err != nil {
		return done, fmt.Errorf("stall master %d: %w", i, err)
	}
	return done, nil
}

// answers reports whether the server at addr answers a PING within timeout.
func answers(addr string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return false
	}
	_, err = readReply(bufio.NewReader(conn))
	return err == nil
}

// Keys returns the keys of master i matching the SCAN pattern match (e.g. prefix+"{name}*"),
// walking the whole key space with SCAN.
func (r *RedLockRig) Keys(i int, match string) ([]string, error) {
	var keys []string
	cursor := "0"
	for {
		reply, err := r.masters[i].DoList("SCAN", cursor, "MATCH", match, "COUNT", "1000")
		if err != nil {
			return nil, fmt.Errorf("master %d: SCAN: %w", i, err)
		}
		if len(reply) != 2 {
			return nil, fmt.Errorf("master %d: SCAN answered %q", i, reply)
		}
		if reply[1] != "" {
			keys = append(keys, strings.Split(reply[1], "\n")...)
		}
		if cursor = reply[0]; cursor == "0" {
			return keys, nil
		}
	}
}

// KeyCount is len(Keys(i, match)).
func (r *RedLockRig) KeyCount(i int, match string) (int, error) {
	keys, err := r.Keys(i, match)
	return len(keys), err
}

// ScriptCalls returns each master's script calls since it started or since ResetStats (see
// (*Redis).ScriptCalls), in Masters order.
func (r *RedLockRig) ScriptCalls() ([]int64, error) {
	out := make([]int64, len(r.masters))
	for i, m := range r.masters {
		n, err := m.ScriptCalls()
		if err != nil {
			return nil, fmt.Errorf("master %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}

// ResetStats zeroes every running master's command statistics (CONFIG RESETSTAT).
func (r *RedLockRig) ResetStats() error {
	for i, m := range r.masters {
		if !m.Running() {
			continue
		}
		if _, err := m.Do("CONFIG", "RESETSTAT"); err != nil {
			return fmt.Errorf("master %d: %w", i, err)
		}
	}
	return nil
}
