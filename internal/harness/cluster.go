package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ClusterOptions configure a ClusterRig. The zero value is three masters with one replica each
// and cluster-node-timeout 2000.
type ClusterOptions struct {
	// NodeTimeout is cluster-node-timeout; default 2 s. A killed master's replica takes over
	// about 1-2 s after it.
	NodeTimeout time.Duration
	// Args are extra redis-server arguments for every node. Do sends no AUTH: do not require
	// passwords here.
	Args []string
}

// ClusterRig is a Redis Cluster of three masters with one replica each, created with
// redis-cli --cluster create, every node on its own loopback port (and cluster bus port) and
// stopped when the test ends. Its methods are safe for concurrent use; those taking no error
// (NodeForSlot, NodeForKey, Masters) fail the test and must be called from the test's goroutine.
type ClusterRig struct {
	t     testing.TB
	nodes []*Redis

	mu     sync.Mutex
	killed *clusterNode // the master the latest KillMaster killed, as the cluster saw it then
}

// clusterSize is how many nodes a rig runs: three masters, three replicas.
const clusterSize = 6

// NewClusterRig starts six cluster-enabled redis-servers, has redis-cli make them a cluster with
// one replica per master, and waits until every node says cluster_state:ok, sees every other
// node connected and agrees on who serves which slot, and every replica is in sync.
func NewClusterRig(t testing.TB, opts ClusterOptions) *ClusterRig {
	t.Helper()
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 2 * time.Second
	}
	c := &ClusterRig{t: t}
	// The nodes' directories go under one made before the nodes' cleanup is registered: cleanups
	// run last first, so the servers stop before their directories are removed (removed under a
	// running node, one that wrote its nodes.conf meanwhile failed the test: "directory not empty").
	parent := t.TempDir()
	t.Cleanup(func() { stopAll(t, c.nodes) })
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("cluster rig: redis-cli not found on PATH (apt-get install redis-tools): %v", err)
	}
	for range clusterSize {
		r, err := startClusterNode(parent, opts)
		if err != nil {
			t.Fatalf("cluster rig: %v", err)
		}
		c.nodes = append(c.nodes, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.SeedAddrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("cluster rig: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := pollUntil(30*time.Second, 20*time.Millisecond, c.ready); err != nil {
		t.Fatalf("cluster rig: not ready: %v", err)
	}
	return c
}

// startClusterNode starts one cluster-enabled node in a directory of its own under parent, its
// cluster bus on a port of its own (port+10000, the default, may be past 65535).
func startClusterNode(parent string, opts ClusterOptions) (*Redis, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := FreePorts(2)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(parent, "node")
		if err != nil {
			return nil, err
		}
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(ports[1]),
			// A delayed diskless sync (5 s by default) would hold every replica's first sync back.
			"--repl-diskless-sync-delay", "0",
		}, opts.Args...)
		r, err := StartRedis(dir, RedisOptions{Port: ports[0], Args: args})
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// ready returns nil once every node is in a healthy, agreed cluster of all the rig's nodes.
func (c *ClusterRig) ready() error {
	views, err := c.views()
	if err != nil {
		return err
	}
	for _, v := range views {
		if len(v.nodes) != clusterSize {
			return fmt.Errorf("node %s knows %d nodes", v.from.Addr, len(v.nodes))
		}
		for _, n := range v.nodes {
			if n.has("fail?", "fail", "handshake", "noaddr") || (!n.has("myself") && !n.connected) {
				return fmt.Errorf("node %s sees %s as %s, link connected %v", v.from.Addr, n.addr, n.flags, n.connected)
			}
		}
		if roles, first := roleMap(v.nodes), roleMap(views[0].nodes); roles != first {
			return fmt.Errorf("node %s sees roles %s, node %s sees %s", views[0].from.Addr, first, v.from.Addr, roles)
		}
	}
	masters := 0
	for _, n := range views[0].nodes {
		if n.has("master") {
			masters++
		}
	}
	if masters != clusterSize/2 {
		return fmt.Errorf("%d masters, want %d", masters, clusterSize/2)
	}
	return c.WaitReplicated(0)
}

// clusterView is one node's CLUSTER NODES.
type clusterView struct {
	from  *Redis
	nodes []clusterNode
}

// views asks every running node for CLUSTER INFO and CLUSTER NODES. It fails unless every one
// says cluster_state:ok and all of them agree on which address serves which slot.
func (c *ClusterRig) views() ([]clusterView, error) {
	var views []clusterView
	for _, r := range c.nodes {
		if !r.Running() {
			continue
		}
		info, err := r.Do("CLUSTER", "INFO")
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", r.Addr, err)
		}
		if state := infoField(info, "cluster_state"); state != "ok" {
			return nil, fmt.Errorf("node %s: cluster_state %s", r.Addr, state)
		}
		out, err := r.Do("CLUSTER", "NODES")
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", r.Addr, err)
		}
		views = append(views, clusterView{from: r, nodes: parseClusterNodes(out)})
	}
	if len(views) == 0 {
		return nil, errors.New("no node is running")
	}
	first := slotMap(views[0].nodes)
	for _, v := range views[1:] {
		if m := slotMap(v.nodes); m != first {
			return nil, fmt.Errorf("node %s sees slots %s, node %s sees %s", views[0].from.Addr, first, v.from.Addr, m)
		}
	}
	return views, nil
}

// view returns the first running node's CLUSTER NODES.
func (c *ClusterRig) view() ([]clusterNode, error) {
	for _, r := range c.nodes {
		if r.Running() {
			out, err := r.Do("CLUSTER", "NODES")
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", r.Addr, err)
			}
			return parseClusterNodes(out), nil
		}
	}
	return nil, errors.New("no node is running")
}

// Nodes returns the rig's six processes, whatever their current roles.
func (c *ClusterRig) Nodes() []*Redis { return slices.Clone(c.nodes) }

// SeedAddrs returns every node's host:port: any running one is a good seed.
func (c *ClusterRig) SeedAddrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, r := range c.nodes {
		addrs[i] = r.Addr
	}
	return addrs
}

// URL returns the seeds in rueidis' URL form: redis://SEED1?addr=SEED2&addr=SEED3...
func (c *ClusterRig) URL() string {
	seeds := c.SeedAddrs()
	return "redis://" + seeds[0] + "?addr=" + strings.Join(seeds[1:], "&addr=")
}

// Masters returns the running masters that serve slots, as the first running node sees them.
func (c *ClusterRig) Masters() []*Redis {
	c.t.Helper()
	masters, err := c.masters()
	if err != nil {
		c.t.Fatalf("cluster rig: %v", err)
	}
	return masters
}

func (c *ClusterRig) masters() ([]*Redis, error) {
	nodes, err := c.view()
	if err != nil {
		return nil, err
	}
	var out []*Redis
	for _, n := range nodes {
		if r := c.node(n.addr); r != nil && r.Running() && n.has("master") && len(n.slots) > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// NodeForSlot returns the master serving slot as the first running node sees it; it fails the
// test when none does.
func (c *ClusterRig) NodeForSlot(slot int) *Redis {
	c.t.Helper()
	nodes, err := c.view()
	if err != nil {
		c.t.Fatalf("cluster rig: %v", err)
	}
	for _, n := range nodes {
		if n.serves(slot) {
			if r := c.node(n.addr); r != nil {
				return r
			}
		}
	}
	c.t.Fatalf("cluster rig: no node serves slot %d", slot)
	return nil
}

// NodeForKey is NodeForSlot(KeySlot(key)).
func (c *ClusterRig) NodeForKey(key string) *Redis {
	c.t.Helper()
	return c.NodeForSlot(KeySlot(key))
}

// KillMaster kills the master at addr with SIGKILL, as a crash would, and remembers it for
// AwaitFailover. It fails when addr is not a slot-serving master.
func (c *ClusterRig) KillMaster(addr string) error {
	r := c.node(addr)
	if r == nil {
		return fmt.Errorf("%s is none of the rig's nodes", addr)
	}
	nodes, err := c.view()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.addr == addr && n.has("master") && len(n.slots) > 0 {
			c.mu.Lock()
			c.killed = &clusterNode{id: n.id, addr: n.addr, flags: n.flags, slots: n.slots}
			c.mu.Unlock()
			return r.Kill()
		}
	}
	return fmt.Errorf("%s serves no slots as a master", addr)
}

// AwaitFailover waits until the slots of the master the latest KillMaster killed are served by
// another node, every running node says cluster_state:ok and agrees, and the new owner answers
// ROLE "master". It returns the new owner's address, or what the cluster looked like last when
// timeout passes first.
func (c *ClusterRig) AwaitFailover(timeout time.Duration) (newMasterAddr string, err error) {
	c.mu.Lock()
	killed := c.killed
	c.mu.Unlock()
	if killed == nil {
		return "", errors.New("no master was killed")
	}
	slot := killed.slots[0][0]
	err = pollUntil(timeout, 20*time.Millisecond, func() error {
		views, err := c.views()
		if err != nil {
			return err
		}
		for _, n := range views[0].nodes {
			if !n.serves(slot) {
				continue
			}
			if n.addr == killed.addr {
				return fmt.Errorf("slot %d still served by %s", slot, n.addr)
			}
			r := c.node(n.addr)
			if r == nil {
				return fmt.Errorf("slot %d served by %s, none of the rig's nodes", slot, n.addr)
			}
			if role, err := r.Role(); role != "master" {
				return fmt.Errorf("slot %d served by %s, whose role is %q (%v)", slot, n.addr, role, err)
			}
			newMasterAddr = n.addr
			return nil
		}
		return fmt.Errorf("no node serves slot %d", slot)
	})
	if err != nil {
		return "", fmt.Errorf("no failover from %s: %w", killed.addr, err)
	}
	return newMasterAddr, nil
}

// MigrateSlot moves slot and its keys from one master to another the way redis-cli --cluster
// reshard does: SETSLOT IMPORTING on to, SETSLOT MIGRATING on from, MIGRATE of the keys in
// batches, then SETSLOT NODE on to, from and the other masters. It returns once every running
// node agrees that to serves slot. Clients meanwhile get ASK redirections for moved keys.
func (c *ClusterRig) MigrateSlot(slot int, from, to *Redis) error {
	return c.migrateSlot(slot, from, to, 100, nil)
}

// MigrateSlotPaced is MigrateSlot one key at a time, calling pause between keys (a fault's
// pacing, e.g. 20-200 ms). The slot stays half-moved meanwhile: single-key commands on moved keys
// get ASK redirections, and a command or script naming keys on both sides answers TRYAGAIN
// ("Multiple keys request during rehashing of slot") until the last key has moved.
func (c *ClusterRig) MigrateSlotPaced(slot int, from, to *Redis, pause func() time.Duration) error {
	return c.migrateSlot(slot, from, to, 1, pause)
}

// migrateSlot moves slot from one master to another, batch keys per MIGRATE, waiting pause()
// (when set) after each MIGRATE.
func (c *ClusterRig) migrateSlot(slot int, from, to *Redis, batch int, pause func() time.Duration) error {
	s := strconv.Itoa(slot)
	fromID, err := from.Do("CLUSTER", "MYID")
	if err != nil {
		return fmt.Errorf("from %s: %w", from.Addr, err)
	}
	toID, err := to.Do("CLUSTER", "MYID")
	if err != nil {
		return fmt.Errorf("to %s: %w", to.Addr, err)
	}
	if _, err := to.Do("CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", to.Addr, err)
	}
	if _, err := from.Do("CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", from.Addr, err)
	}
	host, port, _ := net.SplitHostPort(to.Addr)
	for {
		keys, err := from.DoList("CLUSTER", "GETKEYSINSLOT", s, strconv.Itoa(batch))
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT on %s: %w", from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)
		if _, err := from.Do(args...); err != nil {
			return fmt.Errorf("MIGRATE from %s: %w", from.Addr, err)
		}
		if pause != nil {
			<-time.After(pause()) // the fault's pacing, not synchronisation
		}
	}
	// The new owner first, so that it bumps its config epoch and wins over stale views.
	masters, err := c.masters()
	if err != nil {
		return err
	}
	targets := []*Redis{to, from}
	for _, m := range masters {
		if m != to && m != from {
			targets = append(targets, m)
		}
	}
	for _, r := range targets {
		if _, err := r.Do("CLUSTER", "SETSLOT", s, "NODE", toID); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", r.Addr, err)
		}
	}
	return pollUntil(10*time.Second, 10*time.Millisecond, func() error {
		views, err := c.views()
		if err != nil {
			return err
		}
		for _, n := range views[0].nodes {
			if n.serves(slot) && n.addr == to.Addr {
				return nil
			}
		}
		return fmt.Errorf("slot %d is not yet served by %s", slot, to.Addr)
	})
}

// AwaitHealthy waits until the rig is whole again after a fault: every node running and in one
// healthy cluster (cluster_state:ok everywhere, no node flagged failing, the same slots and roles
// in every view, three slot-serving masters) and every replica in sync with its master. A killed
// master must have been restarted first (it comes back as a replica). It returns what was missing
// last when timeout passes first.
func (c *ClusterRig) AwaitHealthy(timeout time.Duration) error {
	return pollUntil(timeout, 20*time.Millisecond, func() error {
		for _, r := range c.nodes {
			if !r.Running() {
				return fmt.Errorf("node %s is not running", r.Addr)
			}
		}
		return c.ready()
	})
}

// WaitReplicated waits until every running replica is linked to its master and has everything
// its master had written when WaitReplicated was called.
func (c *ClusterRig) WaitReplicated(timeout time.Duration) error {
	replicas := map[*Redis][]*Redis{} // master -> its running replicas, from the replicas' INFO
	for _, r := range c.nodes {
		if !r.Running() {
			continue
		}
		info, err := r.Do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("node %s: %w", r.Addr, err)
		}
		if infoField(info, "role") != "slave" {
			continue
		}
		master := c.node(net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port")))
		if master == nil || !master.Running() {
			continue // its master is gone: nothing to catch up with
		}
		replicas[master] = append(replicas[master], r)
	}
	for master, rs := range replicas {
		if err := waitReplicated(master, rs, timeout); err != nil {
			return err
		}
	}
	return nil
}

// node returns the rig's process at addr, or nil.
func (c *ClusterRig) node(addr string) *Redis {
	for _, r := range c.nodes {
		if r.Addr == addr {
			return r
		}
	}
	return nil
}

// ReplicaOf returns a running replica of master, as the first running node sees them, or nil.
func (c *ClusterRig) ReplicaOf(master *Redis) *Redis {
	c.t.Helper()
	nodes, err := c.view()
	if err != nil {
		c.t.Fatalf("cluster rig: %v", err)
	}
	id := ""
	for _, n := range nodes {
		if n.addr == master.Addr {
			id = n.id
		}
	}
	for _, n := range nodes {
		if r := c.node(n.addr); r != nil && r.Running() && n.masterID == id && id != "" {
			return r
		}
	}
	return nil
}
