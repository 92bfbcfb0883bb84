-- lib.lua: helpers shared by the scripts that grant locks and manage wait queues. It is prepended
-- to those scripts when they are loaded (see scripts.go), so each still runs as one atomic EVAL.
--
-- Queue of lock N (all under the hash tag {N}):
--   q   zset  lease id -> arrival time in microseconds (FIFO order; a re-queued waiter keeps its own)
--   qd  zset  lease id -> liveness deadline in ms (Redis time); its replica pushes it forward while
--             the waiter waits, so the entries of a dead replica age out
--   qm  hash  lease id -> JSON {r: replica, o: owner, t: ttl_ms, w: watchdog, h: max_hold_ms}

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- grant gives the free lock to lease with a new fence and a PEXPIRE of pexpire_ms; returns the fence.
-- fence = max(last fence + 1, now in µs): see acquire.lua. A watchdog lease (wd '1') records
-- :until, the Redis time in ms after which the watchdog no longer renews it (grant + hold_ms).
local function grant(lock, fencekey, lease, owner, ttl, wd, hold_ms, pexpire_ms, now)
  local fence = now
  local last = tonumber(redis.call('SET', fencekey, string.format('%d', fence), 'GET') or '0')
  if fence <= last then
    fence = last + 1
    redis.call('SET', fencekey, string.format('%d', fence))
  end
  local hold_until = 0
  if wd == '1' then
    hold_until = math.floor(now / 1000) + tonumber(hold_ms)
  end
  redis.call('HSET', lock, lease, 1, ':owner', owner, ':fence', string.format('%d', fence), ':ttl', ttl, ':wd', wd,
    ':until', string.format("%d", hold_until))
  redis.call('PEXPIRE', lock, pexpire_ms)
  return fence
end

local function dequeue(q, qd, qm, lease)
  redis.call('ZREM', q, lease)
  redis.call('ZREM', qd, lease)
  redis.call('HDEL', qm, lease)
end

-- prune drops up to 100 queue entries whose liveness deadline has passed.
local function prune(q, qd, qm, now)
  local dead = redis.call('ZRANGEBYSCORE', qd, '-inf', '(' .. math.floor(now / 1000), 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREM', qd, unpack(dead))
    redis.call('HDEL', qm, unpack(dead))
  end
end

-- hint tells the replica of the first waiter when the lock's lease runs out ("e <lock key> <pttl>"),
-- so that its watch checks the lock right then: an expiry publishes nothing by itself.
local function hint(lock, q, qm, chanprefix)
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  local raw = head and redis.call('HGET', qm, head)
  if raw then
    redis.call('PUBLISH', chanprefix .. cjson.decode(raw).r, 'e ' .. lock .. ' ' .. redis.call('PTTL', lock))
  end
end

-- promote hands the free lock to the first live waiter for claim_ms and publishes
-- "g <lease> <fence>" on its replica's channel (chanprefix .. replica): one message, one waiter
-- (plus an expiry hint to the next waiter's replica, in case the claim lapses).
-- The waiter's replica extends the claim to the waiter's TTL, or releases it if the waiter left.
-- Returns the grantee's lease and fence, or nil when nobody waits.
local function promote(lock, fencekey, q, qd, qm, chanprefix, claim_ms, now)
  if redis.call('EXISTS', q) == 0 then
    return nil
  end
  prune(q, qd, qm, now)
  for _ = 1, 10 do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then
      return nil
    end
    local raw = redis.call('HGET', qm, head)
    dequeue(q, qd, qm, head)
    if raw then
      local m = cjson.decode(raw)
      local fence = grant(lock, fencekey, head, m.o, m.t, m.w, m.h, claim_ms, now)
      redis.call('PUBLISH', chanprefix .. m.r, 'g ' .. head .. ' ' .. string.format('%d', fence))
      hint(lock, q, qm, chanprefix)
      return head, fence
    end
  end
  return nil
end
