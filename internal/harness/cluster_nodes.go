package harness

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Reading CLUSTER NODES, and the hash slot of a key.

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr  string
	flags     string   // e.g. "myself,master"
	masterID  string   // a replica's master, "-" for a master
	connected bool     // link-state
	slots     [][2]int // served slot ranges, inclusive; slots being migrated are not listed
}

func (n clusterNode) has(flags ...string) bool {
	for _, f := range strings.Split(n.flags, ",") {
		if slices.Contains(flags, f) {
			return true
		}
	}
	return false
}

func (n clusterNode) serves(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes reads CLUSTER NODES: id ip:port@cport[,hostname] flags master ping-sent
// pong-recv config-epoch link-state slot...
func parseClusterNodes(s string) []clusterNode {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: f[2], masterID: f[3], connected: f[7] == "connected"}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") { // [slot->-id] migrating, [slot-<-id] importing
				continue
			}
			lo, hi, isRange := strings.Cut(sl, "-")
			if !isRange {
				hi = lo
			}
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA == nil && errB == nil {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// slotMap renders who serves which slots as "lo-hi=addr ..." in slot order, to compare views.
func slotMap(nodes []clusterNode) string {
	type owned struct {
		r    [2]int
		addr string
	}
	var all []owned
	for _, n := range nodes {
		for _, r := range n.slots {
			all = append(all, owned{r, n.addr})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].r[0] < all[j].r[0] })
	parts := make([]string, len(all))
	for i, o := range all {
		parts[i] = fmt.Sprintf("%d-%d=%s", o.r[0], o.r[1], o.addr)
	}
	return strings.Join(parts, " ")
}

// roleMap renders every node's role as "addr=master" or "addr>masterID" in address order, to
// compare views.
func roleMap(nodes []clusterNode) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		if n.has("slave") {
			parts[i] = n.addr + ">" + n.masterID
		} else {
			parts[i] = n.addr + "=master"
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// KeySlot returns key's hash slot as Redis Cluster computes it: CRC16 (XMODEM) of the key, or of
// its hash tag (what lies between the first "{" and the next "}", when not empty), modulo 16384.
func KeySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
