-- lib.lua: shared by every script that grants a lock or touches its wait queue. It is prepended to
-- those scripts when they are loaded (see scripts.go), so each still runs as one atomic EVAL, with
-- its helpers by concept: lib_notify.lua (live events), lib_holders.lua, lib_idempotency.lua and
-- lib_queue.lua, in that order.
--
-- Every such script takes KEYS = [lock, fence, q, qd, qm, sh, shm, rs] (fence: the fence floor the
-- lock's grants draw from, see next_fence in core.lua; rs: the Redisson object of the lock's name,
-- or the lock's own key again in the gateway's own layout, see lib_layout.lua) and starts its ARGV with
--   [chanprefix, claim_ms, liveness_ms, fence_ttl_ms, clock_us, kind]; its own arguments follow
--   from ARGV[7]. clock_us is "" (the script reads the Redis clock) or, on RedLock, the calling
--   gateway's clock (see core.lua).
-- kind is 'l' for a lock (exclusive and shared holds) or 's' for a semaphore (permits: shared holds,
-- at most its size at once, and no exclusive ones), followed by the layout of each lock the script
-- takes, in KEYS order: '-' (or nothing) for the gateway's own, 'r' or 'w' for a name shared with
-- Redisson (see lib_layout.lua).
--
-- Holders of resource N (a lock or a semaphore; all keys under the hash tag {N}):
--   lock  hash  the exclusive holder: <lease> -> reentry count, plus :owner, :fence, :ttl, :wd,
--               :until; PEXPIRE = the lease's TTL (locks only)
--   sh    zset  shared holders (a lock's readers, a semaphore's permits): lease -> expiry in ms
--               (Redis time); each expires on its own, and scripts drop expired ones (reclaim)
--   shm   hash  lease -> "<holds> <fence> <ttl_ms> <wd> <until_ms> <owner>" for each shared holder;
--               on a semaphore also :size, its number of permits
--   sh and shm live at least as long as their last holder (and a semaphore's shm as long as its
--   queue), see extend.
-- A lease may hold a lock both ways: an exclusive holder that took a shared hold too (downgrade).
--
-- Queue of resource N:
--   q   zset  lease id -> arrival time in microseconds (FIFO order; a waiter queueing again keeps
--             its arrival)
--   qd  zset  lease id -> liveness deadline in ms (Redis time); its replica pushes it forward while
--             the waiter waits, so the entries of a dead replica age out
--   qm  hash  lease id -> JSON {r: replica, o: owner, t: ttl_ms, w: watchdog, h: max_hold_ms,
--             m: mode ('x' exclusive, 's' shared; absent: 'x'), n: a semaphore's size}
-- The three expire queue_ttl_ms after the last enqueue or heartbeat (see keep_queue; keepalive.lua
-- calls it once two liveness windows of that passed, so up to two windows sooner), so the queue
-- of a lock whose waiters' replicas all died does not stay in Redis forever.
--   ticket:<id>  string, arrival µs: a queue ticket's place, kept TicketGrace after a wait ended
--             (written by dequeue.lua, taken once by acquire.lua)
--   idem:<op>:<lease>:<key>  string: the first answer to a request sent with an Idempotency-Key
--             ("<lease> <owner>" for a new acquire, whose lease part is empty; the reply's integers
--             for a release or re-entry), replayed to its retries (see remember and replay)
--   watch  hash  replica -> until when it streams the lock's events, :seq, :epoch; exists only
--             while someone watches (see notify)
-- The fence floor expires fence_ttl_ms after the last grant under it (see next_fence in core.lua).
local lock, fencekey, q, qd, qm, sh, shm, rs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7],
  KEYS[8]
local chanprefix, claim_ms, liveness_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local kinds = ARGV[6]
local kind, layout = string.sub(kinds, 1, 1), string.sub(kinds, 2, 2)
local queue_ttl_ms = liveness_ms * 10

-- use points every helper below at the keys of the i-th lock of a script that works on several (a
-- multi-lock's: its KEYS are the eight above for each member in turn, in name order), and at its
-- layout.
local function use(i)
  local b = (i - 1) * 8
  lock, fencekey, q, qd, qm, sh, shm, rs = KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5], KEYS[b + 6],
    KEYS[b + 7], KEYS[b + 8]
  layout = string.sub(kinds, i + 1, i + 1)
end

-- of_kind sets the kind and layout of the lock in use from a kind argument (see above) of that
-- lock alone (keepalive.lua's per-lock kinds).
local function of_kind(k)
  kind, layout = string.sub(k, 1, 1), string.sub(k, 2, 2)
end

-- Redis caps the arguments one command may take from Lua's unpack() (~8000), so long lists go in
-- chunks of this many.
local chunk = 1000

-- publish sends a message to a replica's channel (chanprefix .. replica). On Redis Cluster the
-- prefix carries a hash tag of the lock's slot, and the message goes by sharded pub/sub, which
-- reaches the subscribers of that slot's node only (a plain PUBLISH goes to every node).
local sharded = string.find(chanprefix, '{', 1, true) ~= nil
local function publish(replica, msg)
  if sharded then
    redis.call('SPUBLISH', chanprefix .. replica, msg)
  else
    redis.call('PUBLISH', chanprefix .. replica, msg)
  end
end

-- extend makes key live at least ms more (PEXPIRE GT would skip a key without a TTL).
local function extend(key, ms)
  ms = tonumber(ms)
  local left = redis.call('PTTL', key)
  if left ~= -2 and left < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
