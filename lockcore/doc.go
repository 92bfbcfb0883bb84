// Package lockcore is leasegate's lock engine: reentrant leases in Redis with fencing tokens,
// exclusive and shared holds on locks and permits of counting semaphores, FIFO waiting with
// direct hand-off, multi-locks and the watchdog. It speaks Go types and sentinel errors
// (errors.go); nothing Redis-shaped leaves it, and it knows nothing of HTTP.
//
// # How it is built
//
// A Service (service.go) composes a few parts, each a type of its own that holds only what it
// needs (engine.go: where the locks live, their keys and calls, the log, the observer, the
// lifetime):
//
//   - the deployment (deployment.go), the one seam between what a lock does and how Redis is laid
//     out: oneRedis (deploy_one_redis.go: standalone or Sentinel, with replica_acks.go), redisCluster
//     (deploy_cluster.go, slots.go) and redlock (redlock.go: the masters and their restart guard;
//     redlock_quorum.go: their replies made one). Nothing else asks which one it runs on;
//   - waiters (waiters.go: this process's waiting acquires; heartbeat.go: how they are kept in
//     line, for every lock they wait on at once; subscriptions.go: the grant channels they listen
//     to);
//   - the watchdog (watchdog.go: its renewer), which renews watchdog leases on a schedule every
//     replica sweeps;
//   - the ledgers: the held quota (held_quota.go), the long-hold report (long_holds.go) and the most
//     contended names (contention.go). One that is off is not on any request's path;
//   - the event hub (event_hub.go) behind live event streams (events.go, stream_holds.go).
//
// The Service's operations sit on top, a file each: acquire.go (an acquire's way, one step after
// the other: the checks, then reenter.go or a new lease's grant through grant.go, tried once, or
// wait.go, waiting in line; grant.go then finishes either grant), release.go, renew.go, inspect.go
// (and state.go: a lock's state as read), force.go, list.go, watch.go, multilock.go
// (multilock_group.go, multilock_wait.go, multilock_token.go), election.go (campaign, proclaim,
// resign, read, observe; election_log.go: the log's scripts, entries and events;
// election_stream.go: observers, and one follower of each observed election's log).
//
// Below everything: lease.go (what a lease is, what asks for one and what it is granted), keys.go
// (Kind, Ref, Mode and a lock's keys), scripts.go (the table of Lua scripts and the calls made of
// them), contracts.go (each lock script's arguments and reply), wire.go (the private string
// formats written into Redis), token.go and ticket.go (signed lease tokens and queue tickets),
// idempotency_claims.go (the request each Idempotency-Key was first sent with), observer.go,
// options.go.
//
// Read it from the top down: but for a handful of ties, a file uses only files named after it.
//
// # Words
//
//   - lease: one grant of a lock to one owner, named by its ID; its token (token.go) carries the
//     owner and the fence. A lease may hold a lock several times (re-entry) and both ways.
//   - hold: what a lease has on a lock: exclusive, or shared (a reader, or a semaphore's permit).
//   - fence: the number every grant of a lock gets, strictly increasing: the Redis time of the
//     grant in µs, or one more than the last fence under its fence floor.
//   - fence floor: the last fence granted to any lock of one Redis (of one hash slot on a Cluster
//     and RedLock: deployment.fences), the one key that keeps fences rising; a held lock's own
//     fence is in its hash, and a free name has no key.
//   - hand-off: a release, expiry or force release that gives the lock straight to the head of its
//     queue and tells that waiter's replica, which confirms it (a renewal of the waiter's lease).
//   - claim: how long a lock handed off stays reserved for its waiter until it confirms.
//   - queue ticket: a signed note that lets a waiter whose wait ran out keep its place when it
//     comes back within TicketGrace; a multi-lock's (a group queue ticket, multilock_ticket.go)
//     also keeps the group's id, and wraps the ticket of the member whose line it waited in.
//   - idempotency record: the first answer to a request sent with an Idempotency-Key, kept in
//     Redis so that its retries answer the same and change nothing (keys.idempotency).
//   - heartbeat: every Heartbeat, one keepalive script per batch of locks with local waiters keeps
//     their queue entries alive; a lock it names (and one whose holder expires, and every one on a
//     re-subscription) gets the heartbeat script, which finds what pub/sub lost.
//   - schedule member: a watchdog lease's entry in the schedule (wire.go).
//   - long-hold candidate: a hold that may live past LongHold, entered in the shard's "aged"
//     zset, which the long-hold report sweeps (long_holds.go).
//   - copy: one full copy of the locks: the one Redis, or each RedLock master. A majority of
//     copies (the quorum) must agree on RedLock; handOffs is how many must hand a waiter the lock.
//   - restart guard: on RedLock, the time a master that restarted is not counted (redlock.go).
//   - election: a lock of kind KindElection whose exclusive holder leads; its announcement is the
//     entry of its log (elected, proclaimed, resigned, vacant) that says so (election.go).
package lockcore
