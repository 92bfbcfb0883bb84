-- lib_queue.lua (part of lib.lua): the wait queue: its upkeep, hand-offs to its head, and giving holds back.

local function dequeue(lease)
  redis.call('ZREM', q, lease)
  redis.call('ZREM', qd, lease)
  redis.call('HDEL', qm, lease)
end

-- keep_queue pushes the queue keys' expiry forward; the living call it on every enqueue, keepalive and
-- heartbeat.
local function keep_queue()
  redis.call('PEXPIRE', q, queue_ttl_ms)
  redis.call('PEXPIRE', qd, queue_ttl_ms)
  redis.call('PEXPIRE', qm, queue_ttl_ms)
  if kind == 's' then
    extend(shm, queue_ttl_ms) -- a semaphore's size lives as long as anyone waits
  end
end

-- A waiter whose liveness deadline has passed is dead when its replica is gone, but only late when
-- its replica still listens on its grants channel (a gateway starved of CPU runs its heartbeat
-- late): such a waiter keeps its place for starved_ms past its deadline. Redis drops a killed
-- gateway's subscription with its connection, so a dead replica's waiters leave the line at once.
local starved_ms = liveness_ms * 4

-- listening reports whether the replica of the waiter whose queue record is raw still subscribes
-- to its grants channel (PUBSUB NUMSUB, or SHARDNUMSUB on Redis Cluster).
local function listening(raw)
  local channel = chanprefix .. cjson.decode(raw).r
  local n
  if sharded then
    n = redis.call('PUBSUB', 'SHARDNUMSUB', channel)[2]
  else
    n = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  end
  return tonumber(n) > 0
end

-- prune drops up to 100 queue entries whose liveness deadline passed more than starved_ms ago.
local function prune()
  local dead = redis.call('ZRANGEBYSCORE', qd, '-inf', '(' .. (math.floor(now_us() / 1000) - starved_ms), 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREM', qd, unpack(dead))
    redis.call('HDEL', qm, unpack(dead))
    notify('w')
  end
end

-- first_live returns the first live waiter, or nil when nobody live waits. Dead entries are
-- pruned a hundred at a time by deadline, and any still found at the head (the queue is in arrival
-- order, not deadline order) are dropped one by one: one past its deadline is live while its
-- replica listens, for starved_ms.
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
    if deadline and deadline >= now_ms - starved_ms then
      local raw = redis.call('HGET', qm, head)
      if raw and listening(raw) then
        return head
      end
    end
    dequeue(head)
    notify('w')
  end
  return nil
end

-- hint tells the replica of the first waiter when the earliest hold runs out ("e <lock key> <ms>"),
-- so that it checks the lock right then: an expiry publishes nothing by itself.
local function hint()
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  local raw = head and redis.call('HGET', qm, head)
  if raw then
    publish(cjson.decode(raw).r, 'e ' .. lock .. ' ' .. busy_ms())
  end
end

-- here is the replica of the gateway that runs the script, when that gateway hands the holds it
-- gives its own waiters over itself (release.lua sets it; nil elsewhere): see promote.
local here
-- handed_here lists the holds promote gave here's waiters: lease, fence, lease, fence, ...
local handed_here = {}

-- promote hands holds to the waiters at the head of the line while they fit: the first waiter, and
-- after a shared one every shared one behind it (a semaphore: while permits are free). Each gets
-- its hold for claim_ms and one message on its replica's channel (chanprefix .. replica),
-- "g <lease> <fence>"; the next waiter's replica gets an expiry hint. The waiter's replica extends
-- the claim to the waiter's TTL, or passes it on if the waiter left. A lock's waiter of here gets
-- its TTL at once instead, and no message: here's gateway, which is running this script, hands it
-- over in its own process (handed_here), as the waiter's gateway would after confirming a claim.
-- (A semaphore's waiters are answered the permits in use, which their confirmation reads.)
-- Returns how many it granted.
local function promote()
  local granted = 0
  for _ = 1, chunk do
    local head = first_live()
    if not head then
      break
    end
    local raw = redis.call('HGET', qm, head)
    if raw then
      local m = cjson.decode(raw)
      local mode = m.m or 'x'
      if not fits(mode, m.n) then
        break
      end
      dequeue(head)
      local mine = here ~= nil and m.r == here and kind == 'l'
      local ms = claim_ms
      if mine then
        ms = tonumber(m.t)
      end
      local fence = grant(head, mode, m.o, m.t, m.w, m.h, ms)
      if mine then
        handed_here[#handed_here + 1] = head
        handed_here[#handed_here + 1] = fence
      else
        publish(m.r, 'g ' .. head .. ' ' .. string.format('%d', fence))
      end
      notify('h', {{fence, mode, ms, m.o}})
      granted = granted + 1
      if mode == 'x' then
        break
      end
    else
      dequeue(head) -- an entry Redis lost part of: its replica queues it again
    end
  end
  if granted > 0 then
    hint()
  end
  return granted
end

-- held_by returns the fence and remaining ms of lease's hold (the exclusive one if it has both),
-- and its mode; nil when it holds nothing. With only ('x' or 's'), it looks for that hold alone.
local function held_by(lease, only)
  if only ~= 's' and redis.call('HEXISTS', lock, lease) == 1 then
    return tonumber(redis.call('HGET', lock, ':fence')), redis.call('PTTL', lock), 'x'
  end
  if only == 'x' then
    return nil
  end
  local m = shared_hold(lease)
  if m then
    return m.fence, m.left, 's'
  end
  return nil
end

-- give_back frees lease's hold of mode want ('x' or 's') whatever its count, and hands what that
-- leaves to the head of the line (as release.lua does). It returns the hold's watchdog flag ('0' or
-- '1'), or nil when lease held nothing that way.
local function give_back(lease, want)
  local wd
  if want == 'x' then
    local v = redis.call('HMGET', lock, lease, ':wd', ':fence', ':owner')
    if not v[1] then
      return nil
    end
    wd = v[2]
    redis.call('DEL', lock)
    notify('r', {{tonumber(v[3]), 'x', 0, v[4]}})
  else
    local m = shared_hold(lease)
    if not m then
      return nil
    end
    wd = m.wd
    redis.call('ZREM', sh, lease)
    redis.call('HDEL', shm, lease)
    notify('r', {{m.fence, 's', 0, m.owner}})
  end
  if redis.call('EXISTS', q) == 1 then
    dequeue(lease)
    promote()
  end
  return wd
end
