package lockcore

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/rueidis"
)

// redisCluster is the deployment of a Redis Cluster: one copy of every lock, as on one Redis (and
// the same replica acks), spread over slots (slots.go). What the slots change:
//   - grants go by sharded pub/sub, which a script may only publish in its own slot: a replica's
//     grants channel is one per slot, under a hash tag of that slot, subscribed to when a waiter
//     first waits on a lock of that slot (and kept until the Service closes);
//   - the watchdog's schedule is split into watchdogShards shards, so that one node does not carry
//     every renewal;
//   - a multi-lock's members are taken slot by slot, one script per slot.
type redisCluster struct {
	oneRedis
	prefix string // the key prefix: grants channels live under it

	mu    sync.Mutex
	slots map[int]chan struct{} // per slot followed: closed once its subscription is first confirmed
}

func newRedisCluster(one oneRedis, prefix string) *redisCluster {
	return &redisCluster{oneRedis: one, prefix: prefix, slots: map[int]chan struct{}{}}
}

func (d *redisCluster) grants(lockKey string) string { return d.slotGrants(keySlot(lockKey)) }

func (d *redisCluster) slotGrants(slot int) string {
	return d.prefix + "{" + slotTags()[slot] + "}grants:"
}

func (d *redisCluster) slot(key string) int          { return keySlot(key) }
func (d *redisCluster) fences(lockKey string) string { return slotFences(d.prefix, lockKey) }
func (d *redisCluster) shards() int                  { return watchdogShards }

// listen follows nothing yet: a slot's channel is followed when a waiter first waits there.
func (d *redisCluster) listen(listener) {}

// ready returns a channel closed once l's sharded subscription of the lock's slot is first
// confirmed, having l follow it if it is the slot's first lock (kept until the Service closes).
// Each later confirmation (after the slot moved to another node, or a failover) is handled by l.
func (d *redisCluster) ready(l listener, lockKey string) <-chan struct{} {
	slot := keySlot(lockKey)
	d.mu.Lock()
	defer d.mu.Unlock()
	ready := d.slots[slot]
	if ready == nil {
		ready = make(chan struct{})
		d.slots[slot] = ready
		l.follow(feed{client: d.client, channel: d.slotGrants(slot) + l.replicaID(), sharded: true, slot: slot},
			func(first bool) {
				if first {
					close(ready)
				}
			})
	}
	return ready
}

// releaseFeed: Redisson 3.22+ announces releases on a Cluster with SPUBLISH, heard on the
// channel's slot's node alone.
func (d *redisCluster) releaseFeed(channel string) (feed, bool) {
	if channel == "" {
		return feed{}, false
	}
	return feed{client: d.client, channel: channel, sharded: true, slot: keySlot(channel)}, true
}

// masters returns each Cluster master, in address order.
func (d *redisCluster) masters(ctx context.Context) ([]rueidis.Client, error) {
	known := d.client.Nodes()
	addrs := make([]string, 0, len(known))
	for at := range known {
		addrs = append(addrs, at)
	}
	slices.Sort(addrs)
	var out []rueidis.Client
	for _, at := range addrs {
		c := known[at]
		role, err := c.Do(ctx, c.B().Role().Build()).ToArray()
		if err != nil {
			return nil, classify(err)
		}
		if len(role) > 0 {
			if r, _ := role[0].ToString(); r == "master" {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// The watchdog's schedule lives in Redis, not in the process that granted the lease: a zset maps
// "<lock>\n<lease>" (a semaphore's: "<semaphore>\n<lease>\ns") to when its next renewal is due, in Redis time (so gateway clocks play no
// part). Every replica sweeps it, so a watchdog lease outlives the replica that granted it;
// renewal is idempotent, and a claim pushes due entries a little forward so that replicas rarely
// renew the same lease twice.
//
// On Redis Cluster one schedule would put every lease's renewals on one node: the schedule is
// split into watchdogShards shards, each a pair of zsets under a hash tag of its own ("0" to "7",
// slots spread over the masters), a lease going to the shard its lock's name hashes to.
const watchdogShards = 8
