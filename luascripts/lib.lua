-- lib.lua: shared by every script that grants a lock or touches its wait queue. It is prepended to
-- those scripts when they are loaded (see scripts.go), so each still runs as one atomic EVAL.
--
-- Every such script takes KEYS = [lock, fence, q, qd, qm] and starts its ARGV with
--   [chanprefix, claim_ms, liveness_ms, fence_ttl_ms]; its own arguments follow from ARGV[5].
--
-- Queue of lock N (all under the hash tag {N}):
--   q   zset  lease id -> arrival time in microseconds (FIFO order; a waiter queueing again keeps
--             its arrival)
--   qd  zset  lease id -> liveness deadline in ms (Redis time); its replica pushes it forward while
--             the waiter waits, so the entries of a dead replica age out
--   qm  hash  lease id -> JSON {r: replica, o: owner, t: ttl_ms, w: watchdog, h: max_hold_ms}
-- The three expire queue_ttl_ms after the last enqueue or heartbeat (see keep_queue), so the queue
-- of a lock whose waiters' replicas all died does not stay in Redis forever.
--   ticket:<id>  string, arrival µs: a queue ticket's place, kept TicketGrace after a wait ended
--             (written by dequeue.lua, taken once by acquire.lua)
--   idem:<op>:<lease>:<key>  string: the first answer to a request sent with an Idempotency-Key
--             ("<lease> <owner>" for a new acquire, whose lease part is empty; the reply's integers
--             for a release or re-entry), replayed to its retries (see remember and replay)
-- The fence key expires fence_ttl_ms after the lock's last grant (see grant).
local lock, fencekey, q, qd, qm = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local chanprefix, claim_ms, liveness_ms, fence_ttl_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local queue_ttl_ms = liveness_ms * 10

-- Redis caps the arguments one command may take from Lua's unpack() (~8000), so long lists go in
-- chunks of this many.
local chunk = 1000

-- now_us returns the Redis time in microseconds, read once per script run and only when needed
-- (every command a script makes costs Redis CPU, and most uncontended calls need no clock).
local now_cache
local function now_us()
  if not now_cache then
    local t = redis.call('TIME')
    now_cache = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now_cache
end

-- grant gives the free lock to lease with a new fence and a PEXPIRE of pexpire_ms; returns the fence.
-- fence = max(last fence + 1, now in µs): strictly increasing while the fence key lives, and still
-- increasing after it expired (fence_ttl_ms after the last grant), was lost, or was rolled back by a
-- failover, as long as the Redis clock moves forward. A watchdog lease (wd '1') records :until, the
-- Redis time in ms after which the watchdog no longer renews it (grant + hold_ms).
local function grant(lease, owner, ttl, wd, hold_ms, pexpire_ms)
  local fence = now_us()
  local last = tonumber(redis.call('GET', fencekey) or '0')
  if fence <= last then
    fence = last + 1
  end
  redis.call('SET', fencekey, string.format('%d', fence), 'PX', fence_ttl_ms)
  local hold_until = 0
  if wd == '1' then
    hold_until = math.floor(now_us() / 1000) + tonumber(hold_ms)
  end
  redis.call('HSET', lock, lease, 1, ':owner', owner, ':fence', string.format('%d', fence), ':ttl', ttl, ':wd', wd,
    ':until', string.format('%d', hold_until))
  redis.call('PEXPIRE', lock, pexpire_ms)
  return fence
end

-- replay returns the integer reply remembered under latch (nil if none), for a retried request;
-- idem_ms is 0 when the request carries no Idempotency-Key.
local function replay(latch, idem_ms)
  if idem_ms == 0 then
    return nil
  end
  local prev = redis.call('GET', latch)
  if not prev then
    return nil
  end
  local reply = {}
  for n in string.gmatch(prev, '%S+') do
    reply[#reply + 1] = tonumber(n)
  end
  return reply
end

-- remember keeps the integer reply under latch for max(idem_ms, ttl_ms) and returns it. (Numbers
-- are written with %d: cjson would round fences, which exceed its 14 significant digits.)
local function remember(latch, idem_ms, ttl_ms, reply)
  if idem_ms > 0 then
    local parts = {}
    for i = 1, #reply do
      parts[i] = string.format('%d', reply[i])
    end
    redis.call('SET', latch, table.concat(parts, ' '), 'PX', math.max(idem_ms, tonumber(ttl_ms) or 0))
  end
  return reply
end

local function dequeue(lease)
  redis.call('ZREM', q, lease)
  redis.call('ZREM', qd, lease)
  redis.call('HDEL', qm, lease)
end

-- keep_queue pushes the queue keys' expiry forward; the living call it on every enqueue and heartbeat.
local function keep_queue()
  redis.call('PEXPIRE', q, queue_ttl_ms)
  redis.call('PEXPIRE', qd, queue_ttl_ms)
  redis.call('PEXPIRE', qm, queue_ttl_ms)
end

-- prune drops up to 100 queue entries whose liveness deadline has passed.
local function prune()
  local dead = redis.call('ZRANGEBYSCORE', qd, '-inf', '(' .. math.floor(now_us() / 1000), 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREM', qd, unpack(dead))
    redis.call('HDEL', qm, unpack(dead))
  end
end

-- first_live returns the first live waiter, or nil when nobody live waits. Dead entries are
-- pruned a hundred at a time by deadline, and any still found at the head (the queue is in arrival
-- order, not deadline order) are dropped one by one.
local function first_live()
  if redis.call('EXISTS', q) == 0 then
    return nil
  end
  prune()
  local now_ms = math.floor(now_us() / 1000)
  for _ = 1, 100 do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then
      return nil
    end
    local deadline = tonumber(redis.call('ZSCORE', qd, head))
    if deadline and deadline >= now_ms then
      return head
    end
    dequeue(head)
  end
  return nil
end

-- hint tells the replica of the first waiter when the lock's lease runs out ("e <lock key> <pttl>"),
-- so that it checks the lock right then: an expiry publishes nothing by itself.
local function hint()
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  local raw = head and redis.call('HGET', qm, head)
  if raw then
    redis.call('PUBLISH', chanprefix .. cjson.decode(raw).r, 'e ' .. lock .. ' ' .. redis.call('PTTL', lock))
  end
end

-- promote hands the free lock to the first live waiter for claim_ms and publishes
-- "g <lease> <fence>" on its replica's channel (chanprefix .. replica): one message, one waiter
-- (plus an expiry hint to the next waiter's replica, in case the claim lapses).
-- The waiter's replica extends the claim to the waiter's TTL, or passes it on if the waiter left.
-- Returns the grantee's lease and fence, or nil when nobody waits.
local function promote()
  for _ = 1, 10 do
    local head = first_live()
    if not head then
      return nil
    end
    local raw = redis.call('HGET', qm, head)
    dequeue(head)
    if raw then
      local m = cjson.decode(raw)
      local fence = grant(head, m.o, m.t, m.w, m.h, claim_ms)
      redis.call('PUBLISH', chanprefix .. m.r, 'g ' .. head .. ' ' .. string.format('%d', fence))
      hint()
      return head, fence
    end
  end
  return nil
end
