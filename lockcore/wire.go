package lockcore

// The private string formats lockcore writes into Redis and reads back, in one place. The Lua
// side of each is named beside it; a change here is a change of the data layout, which gateway
// replicas of different versions share during a rolling upgrade.
//
//   - schedule members: the watchdog's schedule, "<lock>\n<lease>[\ns|\ne]" (s: a semaphore's, e:
//     an election's) and a multi-lock's
//     "<id>\n<x|s>\n<member>..." (watchdog_schedule.lua, watchdog_renew.lua, multi_renew.lua)
//   - long-hold candidates: "l\n" or "g\n" + a schedule member, in the aged zsets (aged.lua)
//   - held members: "<kind> <name> <lease>" in a principal's ledger (held.lua)
//   - script arguments: kinds ("l", "s"; an election is an "l"), modes ("x", "s"), flags ("0", "1"),
//     milliseconds
//   - an election's leader hash and log entries (luascripts/lib_election.lua, read in election_log.go)
//   - a fence is the Redis time of its grant in µs (core.lua's next_fence), hence heldSince
//
// Two more live in Lua and are read where they arrive: the messages on a replica's grant channel
// ("g <lease> <fence>", "e <lock key> <ms>", "v <lock key> ..." for live events: lib.lua's publish
// and lib_notify.lua; read by waiters.onMessage and parseEventMsg) and a queue entry's metadata
// (JSON with keys r, o, t, w, h, m, n: lib.lua's header). They keep their one-letter names: every
// gateway replica reads what every other writes, so renaming them would break a rolling upgrade
// (a new replica would miss an old one's hand-offs) for no gain a user can see.

import (
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// scheduleShard is one shard of the schedule: single leases' renewals and multi-locks', and the
// holds that may outlive the long-hold threshold (see long_holds.go).
type scheduleShard struct{ leases, groups, candidates string }

// scheduleMember is l's entry in the watchdog schedule. An election's ("\ne") is not understood by
// a build before elections, which drops the duty when it sweeps it: during a rolling upgrade, a
// watchdog leader's lease is renewed only once every replica runs a build with elections.
func scheduleMember(l Lease) string {
	switch l.Kind {
	case KindSemaphore:
		return l.Lock + "\n" + l.ID + "\ns"
	case KindElection:
		return l.Lock + "\n" + l.ID + "\ne"
	}
	return l.Lock + "\n" + l.ID
}

// groupScheduleMember is m's entry in the multi-lock watchdog schedule: "<id>\n<x|s>\n<member>...".
func groupScheduleMember(m MultiLease) string {
	return m.ID + "\n" + m.Mode.arg() + "\n" + strings.Join(m.Locks, "\n")
}

// parseGroupScheduleMember reads groupScheduleMember's format back.
func parseGroupScheduleMember(member string) (MultiLease, bool) {
	parts := strings.Split(member, "\n")
	if len(parts) < 4 || (parts[1] != "x" && parts[1] != "s") {
		return MultiLease{}, false
	}
	m := MultiLease{ID: parts[0], Locks: parts[2:], Mode: Exclusive}
	if parts[1] == "s" {
		m.Mode = Shared
	}
	return m, true
}

// candidateMember is a single lease's member of the aged zset: "l\n" + its schedule member.
func candidateMember(l Lease) string { return "l\n" + scheduleMember(l) }

// candidateGroupMember is a multi-lock's: "g\n" + its schedule member.
func candidateGroupMember(m MultiLease) string { return "g\n" + groupScheduleMember(m) }

// heldMember is the ledger's name for the hold lease has (or may be granted) on r.
func heldMember(r Ref, lease string) string { return r.Kind.String() + " " + r.Name + " " + lease }

// groupHeldMembers are the ledger's names for a multi-lock's holds: one per member.
func groupHeldMembers(m MultiLease) []string {
	out := make([]string, len(m.Locks))
	for i, name := range m.Locks {
		out[i] = heldMember(LockRef(name), m.ID)
	}
	return out
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func watchKey(lockKey string) string { return lockKey + ":watch" }

// parseScheduleMember reads scheduleMember's format back.
func parseScheduleMember(member string) (ref Ref, lease string, ok bool) {
	parts := strings.Split(member, "\n")
	if len(parts) < 2 {
		return Ref{}, "", false
	}
	ref, lease = LockRef(parts[0]), parts[1]
	if len(parts) == 3 && parts[2] == "s" {
		ref.Kind = KindSemaphore
	} else if len(parts) == 3 && parts[2] == "e" {
		ref.Kind = KindElection
	}
	return ref, lease, true
}

// parseCandidateMember reads candidateMember's and candidateGroupMember's formats back: the lock (a multi-lock's
// first member) and the lease it names, and the multi-lock's id ("" for a single lease).
func parseCandidateMember(member string) (ref Ref, lease, group string, ok bool) {
	kind, rest, _ := strings.Cut(member, "\n")
	switch kind {
	case "l":
		ref, lease, ok = parseScheduleMember(rest)
		return ref, lease, "", ok
	case "g":
		m, ok := parseGroupScheduleMember(rest)
		if !ok {
			return Ref{}, "", "", false
		}
		return LockRef(m.Locks[0]), m.ID, m.ID, true
	}
	return Ref{}, "", "", false
}

// scheduleShards are the watchdog schedule's shards (see watchdog.go).
type scheduleShards []scheduleShard

// newScheduleShards lays out n shards (see deployment.shards): one keeps the names it always
// had; more put each shard under a hash tag of its own ("0" to "7": slots spread over a Cluster's
// masters).
func newScheduleShards(prefix string, n int) scheduleShards {
	if n == 1 {
		return scheduleShards{{prefix + "watchdog", prefix + "watchdog:multi", prefix + "holds:aged"}}
	}
	shards := make(scheduleShards, n)
	for i := range shards {
		base := prefix + "watchdog:{" + strconv.Itoa(i) + "}"
		shards[i] = scheduleShard{base, base + ":multi", base + ":aged"}
	}
	return shards
}

// of returns the shard of the lock (or multi-lock id) name.
func (sh scheduleShards) of(name string) scheduleShard {
	if len(sh) == 1 {
		return sh[0]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return sh[h.Sum32()%uint32(len(sh))]
}

// heldSince is how long ago a hold with fence was granted: a fence is the Redis clock in µs at its
// grant (or one more than the last fence under its fence floor, see next_fence in core.lua), so its age
// needs no extra state. Across hosts it includes the clock offset between Redis and this process.
func heldSince(fence int64, now time.Time) time.Duration {
	return max(now.Sub(time.UnixMicro(fence)), 0)
}
