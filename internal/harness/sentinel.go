package harness

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SentinelOptions configure a SentinelRig. The zero value is master set "leasegate" with two
// replicas, down-after-milliseconds 1000 and failover-timeout 3000.
type SentinelOptions struct {
	// MasterSet names the monitored master; default "leasegate".
	MasterSet string
	// Replicas is how many replicas the master starts with; default 2.
	Replicas int
	// DownAfter is the sentinels' down-after-milliseconds; default 1 s.
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout; default 3 s. It also bounds a failover
	// attempt whose leader election failed, and the next attempt waits twice this.
	FailoverTimeout time.Duration
	// Args are extra redis-server arguments for the master and the replicas.
	Args []string
}

// SentinelRig is a master with replicas (--replicaof) and three sentinels monitoring it with a
// quorum of 2, every process on its own loopback port and stopped when the test ends. Its
// methods are safe for concurrent use; those taking no error (Master, Replicas) fail the test and
// must be called from the test's goroutine.
type SentinelRig struct {
	t         testing.TB
	set       string
	dir       string   // where every server's own directory is made
	nodes     []*Redis // the master and replicas, the initial master first
	sentinels []*Redis

	mu     sync.Mutex
	master string // the master's address before the latest KillMaster, or after the latest failover
}

// sentinelCount is how many sentinels a rig runs; the quorum is 2.
const sentinelCount = 3

// NewSentinelRig starts the master, waits for its replicas to be in sync, then starts the
// sentinels and waits until each one sees the master, every replica and the other sentinels. The
// sentinels are told about each other in their configuration files (as sentinel itself would
// have rewritten them), so they need not wait for hello messages, which come every 2 s.
func NewSentinelRig(t testing.TB, opts SentinelOptions) *SentinelRig {
	t.Helper()
	if opts.MasterSet == "" {
		opts.MasterSet = "leasegate"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = 3 * time.Second
	}
	// Every server's directory goes under one made before the servers' cleanup is registered:
	// cleanups run last first, so the servers stop before their directories are removed (a
	// sentinel rewrites its configuration file while it runs; see the Cluster rig).
	s := &SentinelRig{t: t, set: opts.MasterSet, dir: t.TempDir()}
	t.Cleanup(func() { stopAll(t, append(slices.Clone(s.sentinels), s.nodes...)) })
	// A delayed diskless sync (5 s by default) would hold every replica's first sync back.
	dataArgs := append([]string{"--repl-diskless-sync-delay", "0"}, opts.Args...)
	master, err := s.startIn("master", RedisOptions{Args: dataArgs})
	if err != nil {
		t.Fatalf("sentinel rig: start master: %v", err)
	}
	s.nodes = append(s.nodes, master)
	s.master = master.Addr
	for range opts.Replicas {
		args := append(slices.Clone(dataArgs), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
		r, err := s.startIn("replica", RedisOptions{Args: args})
		if err != nil {
			t.Fatalf("sentinel rig: start replica: %v", err)
		}
		s.nodes = append(s.nodes, r)
	}
	if err := waitReplicated(master, s.nodes[1:], 10*time.Second); err != nil {
		t.Fatalf("sentinel rig: %v", err)
	}
	if err := s.startSentinels(t, master.Port, opts); err != nil {
		t.Fatalf("sentinel rig: start sentinels: %v", err)
	}
	// A sentinel that tried another one's port before it was bound retries after ping-period
	// (1 s), marking it down meanwhile: shorten that while the sentinels connect.
	s.sentinelDebug(t, "PING-PERIOD", "100")
	if err := pollUntil(10*time.Second, 10*time.Millisecond, func() error { return s.sentinelsReady(opts.Replicas) }); err != nil {
		t.Fatalf("sentinel rig: sentinels not ready: %v", err)
	}
	s.sentinelDebug(t, "PING-PERIOD", "1000")
	return s
}

// startIn starts a data node in a new directory under the rig's (named after what it is).
func (s *SentinelRig) startIn(what string, opts RedisOptions) (*Redis, error) {
	dir, err := os.MkdirTemp(s.dir, what)
	if err != nil {
		return nil, err
	}
	return StartRedis(dir, opts)
}

// sentinelDebug sets one of the sentinels' internal timings (SENTINEL DEBUG, milliseconds).
func (s *SentinelRig) sentinelDebug(t testing.TB, param, value string) {
	t.Helper()
	for _, sen := range s.sentinels {
		if _, err := sen.Do("SENTINEL", "DEBUG", param, value); err != nil {
			t.Fatalf("sentinel rig: SENTINEL DEBUG %s %s on %s: %v", param, value, sen.Addr, err)
		}
	}
}

// startSentinels writes each sentinel's configuration, naming the others as known sentinels,
// and starts them on ports picked together (all again if one was taken meanwhile).
func (s *SentinelRig) startSentinels(t testing.TB, masterPort int, opts SentinelOptions) error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := FreePorts(sentinelCount)
		if err != nil {
			return err
		}
		ids := make([]string, sentinelCount)
		for i := range ids {
			b := make([]byte, 20)
			_, _ = rand.Read(b)
			ids[i] = hex.EncodeToString(b)
		}
		confs := make([]string, sentinelCount)
		for i := range ports {
			var conf strings.Builder
			fmt.Fprintf(&conf, "sentinel monitor %s 127.0.0.1 %d 2\n", s.set, masterPort)
			fmt.Fprintf(&conf, "sentinel down-after-milliseconds %s %d\n", s.set, opts.DownAfter.Milliseconds())
			fmt.Fprintf(&conf, "sentinel failover-timeout %s %d\n", s.set, opts.FailoverTimeout.Milliseconds())
			for j, other := range ports {
				if j != i {
					fmt.Fprintf(&conf, "sentinel known-sentinel %s 127.0.0.1 %d %s\n", s.set, other, ids[j])
				}
			}
			fmt.Fprintf(&conf, "sentinel myid %s\n", ids[i])
			dir, err := os.MkdirTemp(s.dir, "sentinel")
			if err != nil {
				return err
			}
			confs[i] = filepath.Join(dir, "sentinel.conf")
			if err := os.WriteFile(confs[i], []byte(conf.String()), 0o600); err != nil {
				return err
			}
		}
		// Started together: a sentinel that finds another one's port closed retries only after
		// a second (and marks it down meanwhile).
		started := make([]*Redis, sentinelCount)
		errs := make([]error, sentinelCount)
		var wg sync.WaitGroup
		for i, port := range ports {
			wg.Go(func() {
				started[i], errs[i] = StartRedis(filepath.Dir(confs[i]), RedisOptions{Port: port, ConfFile: confs[i], Sentinel: true})
			})
		}
		wg.Wait()
		if lastErr = errors.Join(errs...); lastErr == nil {
			s.sentinels = started
			break
		}
		for _, r := range started {
			if r != nil {
				_ = r.Stop()
			}
		}
	}
	return lastErr
}

// sentinelsReady returns nil once every sentinel sees the master up, its replicas linked and the
// other sentinels connected: what a failover needs.
func (s *SentinelRig) sentinelsReady(replicas int) error {
	for _, sen := range s.sentinels {
		m, err := sen.DoList("SENTINEL", "MASTER", s.set)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sen.Addr, err)
		}
		f := pairs(m)
		if f["flags"] != "master" || f["num-slaves"] != strconv.Itoa(replicas) || f["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
			return fmt.Errorf("sentinel %s sees master flags %q, %s replicas, %s other sentinels",
				sen.Addr, f["flags"], f["num-slaves"], f["num-other-sentinels"])
		}
		reps, err := sen.DoList("SENTINEL", "REPLICAS", s.set)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sen.Addr, err)
		}
		for _, rep := range reps {
			f := pairs(strings.Split(rep, "\n"))
			if f["flags"] != "slave" || f["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s sees replica %s flags %q link %q", sen.Addr, f["name"], f["flags"], f["master-link-status"])
			}
		}
		others, err := sen.DoList("SENTINEL", "SENTINELS", s.set)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sen.Addr, err)
		}
		for _, o := range others {
			if f := pairs(strings.Split(o, "\n")); f["flags"] != "sentinel" {
				return fmt.Errorf("sentinel %s sees sentinel %s flags %q", sen.Addr, f["name"], f["flags"])
			}
		}
	}
	return nil
}

// MasterSet returns the name the sentinels monitor the master under.
func (s *SentinelRig) MasterSet() string { return s.set }

// SentinelAddrs returns the sentinels' host:port addresses.
func (s *SentinelRig) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, r := range s.sentinels {
		addrs[i] = r.Addr
	}
	return addrs
}

// Sentinels returns the sentinel processes (to stop one, say).
func (s *SentinelRig) Sentinels() []*Redis { return slices.Clone(s.sentinels) }

// Nodes returns the master and replica processes, whatever their current roles, the initial
// master first.
func (s *SentinelRig) Nodes() []*Redis { return slices.Clone(s.nodes) }

// URL returns the rig in rueidis' Sentinel URL form:
// redis://SENTINEL1?addr=SENTINEL2&addr=SENTINEL3&master_set=NAME.
func (s *SentinelRig) URL() string {
	addrs := s.SentinelAddrs()
	var b strings.Builder
	b.WriteString("redis://" + addrs[0] + "?")
	for _, a := range addrs[1:] {
		b.WriteString("addr=" + a + "&")
	}
	b.WriteString("master_set=" + url.QueryEscape(s.set))
	return b.String()
}

// Master returns the current master as the first sentinel that answers names it (during a
// failover, sentinels may briefly disagree). It fails the test when no sentinel answers.
func (s *SentinelRig) Master() *Redis {
	s.t.Helper()
	addr, err := s.masterAddr()
	if err != nil {
		s.t.Fatalf("sentinel rig: %v", err)
	}
	n := s.node(addr)
	if n == nil {
		s.t.Fatalf("sentinel rig: the sentinels name %s, none of the rig's servers", addr)
	}
	return n
}

// MasterAddr returns the current master's address as the first sentinel that answers names it,
// or an error when none answers: Master for goroutines other than the test's.
func (s *SentinelRig) MasterAddr() (string, error) { return s.masterAddr() }

// Replicas returns the running master and replica processes other than Master().
func (s *SentinelRig) Replicas() []*Redis {
	s.t.Helper()
	return s.replicasOf(s.Master())
}

func (s *SentinelRig) replicasOf(master *Redis) []*Redis {
	var out []*Redis
	for _, n := range s.nodes {
		if n != master && n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// KillMaster kills the current master with SIGKILL, as a crash would, and remembers its address
// for AwaitFailover.
func (s *SentinelRig) KillMaster() error {
	addr, err := s.masterAddr()
	if err != nil {
		return err
	}
	n := s.node(addr)
	if n == nil {
		return fmt.Errorf("the sentinels name %s, none of the rig's servers", addr)
	}
	s.mu.Lock()
	s.master = addr
	s.mu.Unlock()
	return n.Kill()
}

// AwaitFailover polls the sentinels until every one that answers (at least a majority) names
// the same master, other than the one before the latest KillMaster, and that master answers ROLE
// "master". It returns the new master's address, or an error saying what the sentinels answered
// last when timeout passes first. The other replicas may still be re-syncing: see WaitReplicated.
func (s *SentinelRig) AwaitFailover(timeout time.Duration) (newMasterAddr string, err error) {
	s.mu.Lock()
	old := s.master
	s.mu.Unlock()
	err = pollUntil(timeout, 20*time.Millisecond, func() error {
		var answers []string
		for _, sen := range s.sentinels {
			if addr, err := sentinelMasterAddr(sen, s.set); err == nil {
				answers = append(answers, addr)
			}
		}
		if len(answers) <= len(s.sentinels)/2 {
			return fmt.Errorf("only %d of %d sentinels answer", len(answers), len(s.sentinels))
		}
		for _, a := range answers {
			if a == old || a != answers[0] {
				return fmt.Errorf("sentinels name %v (old master %s)", answers, old)
			}
		}
		n := s.node(answers[0])
		if n == nil {
			return fmt.Errorf("sentinels name %s, none of the rig's servers", answers[0])
		}
		if role, err := n.Role(); role != "master" {
			return fmt.Errorf("sentinels name %s, whose role is %q (%v)", n.Addr, role, err)
		}
		newMasterAddr = n.Addr
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("no failover from %s: %w", old, err)
	}
	s.mu.Lock()
	s.master = newMasterAddr
	s.mu.Unlock()
	return newMasterAddr, nil
}

// Failover asks the sentinels for a failover of a master that is alive (SENTINEL FAILOVER, sent
// to each sentinel in turn until one starts it; a refusal such as NOGOODSLAVE while the replicas
// catch up is retried until timeout), then waits as AwaitFailover does for the sentinels to agree
// on a new master that answers ROLE "master". It returns the new master's address. The old master
// stays up and writable until the sentinels turn it into a replica, some seconds later: see
// AwaitSettled.
func (s *SentinelRig) Failover(timeout time.Duration) (newMasterAddr string, err error) {
	deadline := time.Now().Add(timeout)
	old, err := s.masterAddr()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.master = old
	s.mu.Unlock()
	err = pollUntil(timeout, 50*time.Millisecond, func() error {
		var errs []error
		for _, sen := range s.sentinels {
			_, err := sen.Do("SENTINEL", "FAILOVER", s.set)
			if err == nil {
				return nil
			}
			errs = append(errs, fmt.Errorf("sentinel %s: %w", sen.Addr, err))
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return "", fmt.Errorf("SENTINEL FAILOVER %s refused: %w", s.set, err)
	}
	return s.AwaitFailover(max(time.Until(deadline), time.Second))
}

// AwaitSettled waits until the rig is whole and quiet again after a fault: every sentinel names
// the same master and flags it plain "master" (not down, no failover under way), that master
// answers ROLE "master", every other node runs, answers ROLE "slave" and replicates from it, in
// sync with what it had written once the sentinels agreed. A master that was killed must have
// been restarted first (the sentinels then turn it into a replica). It does not wait for the
// sentinels' own view of the replicas, which they refresh only every 10 s. It returns what was
// missing last when timeout passes first.
func (s *SentinelRig) AwaitSettled(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var master *Redis
	err := pollUntil(timeout, 20*time.Millisecond, func() error {
		var addrs []string
		for _, sen := range s.sentinels {
			m, err := sen.DoList("SENTINEL", "MASTER", s.set)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", sen.Addr, err)
			}
			f := pairs(m)
			if f["flags"] != "master" {
				return fmt.Errorf("sentinel %s flags master %s:%s %q", sen.Addr, f["ip"], f["port"], f["flags"])
			}
			addrs = append(addrs, net.JoinHostPort(f["ip"], f["port"]))
		}
		for _, a := range addrs {
			if a != addrs[0] {
				return fmt.Errorf("sentinels name %v", addrs)
			}
		}
		master = s.node(addrs[0])
		if master == nil {
			return fmt.Errorf("sentinels name %s, none of the rig's servers", addrs[0])
		}
		if role, err := master.Role(); role != "master" {
			return fmt.Errorf("sentinels name %s, whose role is %q (%v)", master.Addr, role, err)
		}
		for _, n := range s.nodes {
			if n == master {
				continue
			}
			if !n.Running() {
				return fmt.Errorf("%s is not running", n.Addr)
			}
			if role, err := n.Role(); role != "slave" {
				return fmt.Errorf("%s answers role %q (%v), master is %s", n.Addr, role, err, master.Addr)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sentinel rig not settled: %w", err)
	}
	s.mu.Lock()
	s.master = master.Addr
	s.mu.Unlock()
	return waitReplicated(master, s.replicasOf(master), max(time.Until(deadline), time.Second))
}

// WaitReplicated waits until every running replica replicates from the current master, with its
// link up and everything the master had written when WaitReplicated was called.
func (s *SentinelRig) WaitReplicated(timeout time.Duration) error {
	addr, err := s.masterAddr()
	if err != nil {
		return err
	}
	master := s.node(addr)
	if master == nil {
		return fmt.Errorf("the sentinels name %s, none of the rig's servers", addr)
	}
	return waitReplicated(master, s.replicasOf(master), timeout)
}

// masterAddr asks the sentinels in turn for the master's address; the first answer counts.
func (s *SentinelRig) masterAddr() (string, error) {
	var errs []error
	for _, sen := range s.sentinels {
		addr, err := sentinelMasterAddr(sen, s.set)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", sen.Addr, err))
	}
	return "", fmt.Errorf("no sentinel names the master: %w", errors.Join(errs...))
}

// node returns the rig's process at addr, or nil.
func (s *SentinelRig) node(addr string) *Redis {
	for _, n := range s.nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// sentinelMasterAddr asks sen for set's master: SENTINEL GET-MASTER-ADDR-BY-NAME.
func sentinelMasterAddr(sen *Redis, set string) (string, error) {
	hp, err := sen.DoList("SENTINEL", "GET-MASTER-ADDR-BY-NAME", set)
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("master set %q unknown", set)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// waitReplicated waits until each replica follows master with its link up, has reached the
// replication offset master had on the call, and master streams to it (state=online: a replica
// that has just loaded the master's snapshot says its link is up before that).
func waitReplicated(master *Redis, replicas []*Redis, timeout time.Duration) error {
	info, err := master.Do("INFO", "replication")
	if err != nil {
		return fmt.Errorf("master %s: %w", master.Addr, err)
	}
	offset, _ := strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
	return pollUntil(timeout, 10*time.Millisecond, func() error {
		info, err := master.Do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("master %s: %w", master.Addr, err)
		}
		for _, r := range replicas {
			if !strings.Contains(info, ",port="+strconv.Itoa(r.Port)+",state=online,") {
				return fmt.Errorf("master %s does not stream to %s yet: %s", master.Addr, r.Addr, info)
			}
			info, err := r.Do("INFO", "replication")
			if err != nil {
				return fmt.Errorf("replica %s: %w", r.Addr, err)
			}
			at := net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port"))
			link := infoField(info, "master_link_status")
			got, _ := strconv.ParseInt(infoField(info, "slave_repl_offset"), 10, 64)
			if at != master.Addr || link != "up" || got < offset {
				return fmt.Errorf("replica %s follows %s, link %q, offset %d of %d", r.Addr, at, link, got, offset)
			}
		}
		return nil
	})
}

// infoField returns field's value in an INFO reply, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// pairs turns a flat name, value, name, value... reply into a map.
func pairs(flat []string) map[string]string {
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		m[flat[i]] = flat[i+1]
	}
	return m
}
