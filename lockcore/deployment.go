package lockcore

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// deployment is where the locks live, and the engine's one seam between what a lock does and
// how the Redis it runs on is laid out. Three implement it:
//
//   - oneRedis (deploy_one_redis.go): a single Redis, standalone or behind Sentinel, with replica
//     acknowledgements when asked (replica_acks.go);
//   - redisCluster (deploy_cluster.go): one Redis, sharded: sharded pub/sub per slot, a watchdog
//     schedule in shards, multi-locks split by slot;
//   - redlock (redlock*.go): independent masters, each a full copy, a lock held where a majority
//     holds it.
//
// Nothing outside them asks which one it runs on: a deployment answers for the shape it has
// (how many copies, what a reply means, which features it offers).
type deployment interface {
	// run runs c and returns the reply the deployment stands by: the one Redis's, or the one a
	// majority of masters agree on. The round trip is detached from ctx's cancellation, so that a
	// caller who goes away cannot leave a write's outcome unknown. Redis and transport errors come
	// back classified (ErrUnavailable where retrying can help).
	run(ctx context.Context, c call) ([]rueidis.RedisMessage, error)
	// each runs c on every copy of the locks and hands act each reply as it comes (from: the
	// copy's tag, see event.from). It returns once enough copies answered, or after within; act
	// may still run after it returns, for the copies that answer later.
	each(ctx context.Context, c call, within time.Duration, act func(from int, reply []rueidis.RedisMessage, err error))
	// copies are the clients of every full copy of the locks (one, but RedLock's masters), and
	// live those whose copy counts now (a restarted RedLock master's does not).
	copies() []rueidis.Client
	live() []rueidis.Client
	// masters lists a client per Redis master holding some of the locks, for scans.
	masters(ctx context.Context) ([]rueidis.Client, error)
	// handOffs is how many copies must hand a waiter the lock before it confirms.
	handOffs() int
	// handsOver says whether a release may give the releasing gateway's own waiters their TTL at
	// once, answered without a confirmation (see waiters.handingOver): with one copy of the locks,
	// and no replica acks (a release is not waited for: with them, the waiter's confirmation is
	// the write the replicas acknowledge before the grant is answered).
	handsOver() bool
	// validity is how long a lease of ttl granted now is good for its holder.
	validity(ttl time.Duration) time.Duration
	// clock is a lock call's clock argument: "" (the scripts read Redis's clock), or the
	// gateway's in µs, the same for every master (see core.lua).
	clock() string
	// offers returns an ErrNotSupported for a feature the deployment cannot offer, nil otherwise.
	offers(f feature) error

	// grants is the prefix of the grant channels a script on the lock with key lockKey publishes
	// to (the channel is prefix + replica).
	grants(lockKey string) string
	// listen has l follow the grant channels that serve every lock; ready returns a channel closed
	// once messages about the lock with key lockKey reach l, having l follow its channel first if
	// needed (call it with l's lock held, before the Service closes).
	listen(l listener)
	ready(l listener, lockKey string) <-chan struct{}
	// releaseFeed is how this process hears another client's sharded releases on channel (a
	// Redisson client's SPUBLISH on a Redis Cluster), when the deployment has them: a feed to follow while it waits on the name
	// (see redisson_wakeups.go). Elsewhere the pattern subscription hears every release; and a
	// name not shared with Redisson has no channel ("").
	releaseFeed(channel string) (feed, bool)
	// slot tells which keys one script may take together: keys of the same slot.
	slot(key string) int
	// fences is the key of the fence floor the grants of the lock with key lockKey draw from: the
	// last fence granted there (see next_fence in core.lua). One Redis keeps one for every lock;
	// a Cluster one per hash slot (a script's keys share a slot); RedLock one per hash slot too,
	// so that masters agree on a name's fences whatever other names they saw granted.
	fences(lockKey string) string
	// shards is how many shards the watchdog's schedule is split into.
	shards() int

	ping(ctx context.Context) error
	// close releases what the deployment holds, once the Service stopped using it.
	close()
}

// listener is this process's end of the grant channels (waiters.go).
type listener interface {
	replicaID() string
	// follow keeps f's subscription until the Service closes; confirmed (if set) runs on each
	// confirmation of it.
	follow(f feed, confirmed func(first bool))
}

// feed is one grant channel of this process: on client, subscribed to as channel (sharded: by
// SSUBSCRIBE, a Cluster slot's), its messages coming from copy from (see event.from).
type feed struct {
	client  rueidis.Client
	channel string
	sharded bool
	slot    int // sharded: its slot
	from    int
}

// feature is what a deployment may lack.
type feature string

const (
	featureSemaphores feature = "semaphores"
	featureMultiLocks feature = "multi-locks"
	featureEvents     feature = "live events"
	featureListing    feature = "listing"
	featureHeldQuota  feature = "the cap on held leases"
	featureLongHolds  feature = "the long-hold report"
	featureAcks       feature = "replica acks"
	featureKeyReuse   feature = "detecting a reused Idempotency-Key"
	featureElections  feature = "elections"
)

// closedChan is ready at once: RedLock's waiters do not wait for their masters' subscriptions (a
// hand-off whose message a master's subscription missed is found by the heartbeat).
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
