-- lib.lua: shared by every script that grants a lock or touches its wait queue. It is prepended to
-- those scripts when they are loaded (see scripts.go), so each still runs as one atomic EVAL.
--
-- Every such script takes KEYS = [lock, fence, q, qd, qm, sh, shm] and starts its ARGV with
--   [chanprefix, claim_ms, liveness_ms, fence_ttl_ms, kind]; its own arguments follow from ARGV[6].
-- kind is 'l' for a lock (exclusive and shared holds) or 's' for a semaphore (permits: shared holds,
-- at most its size at once, and no exclusive ones).
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
-- The three expire queue_ttl_ms after the last enqueue or heartbeat (see keep_queue), so the queue
-- of a lock whose waiters' replicas all died does not stay in Redis forever.
--   ticket:<id>  string, arrival µs: a queue ticket's place, kept TicketGrace after a wait ended
--             (written by dequeue.lua, taken once by acquire.lua)
--   idem:<op>:<lease>:<key>  string: the first answer to a request sent with an Idempotency-Key
--             ("<lease> <owner>" for a new acquire, whose lease part is empty; the reply's integers
--             for a release or re-entry), replayed to its retries (see remember and replay)
--   watch  hash  replica -> until when it streams the lock's events, :seq, :epoch; exists only
--             while someone watches (see notify)
-- The fence key expires fence_ttl_ms after the lock's last grant (see grant).
local lock, fencekey, q, qd, qm, sh, shm = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local chanprefix, claim_ms, liveness_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local kind = ARGV[5]
local queue_ttl_ms = liveness_ms * 10

-- use points every helper below at the keys of the i-th lock of a script that works on several (a
-- multi-lock's: its KEYS are the seven above for each member in turn, in name order).
local function use(i)
  local b = (i - 1) * 7
  lock, fencekey, q, qd, qm, sh, shm = KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5], KEYS[b + 6],
    KEYS[b + 7]
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

-- A shared holder's entry in shm.
local function pack(holds, fence, ttl, wd, until_ms, owner)
  return string.format('%d %d %d %s %d ', holds, fence, ttl, wd, until_ms) .. owner
end

local function unpack_meta(raw)
  local holds, fence, ttl, wd, until_ms, owner = string.match(raw, '^(%d+) (%d+) (%d+) (%d) (%d+) (.*)$')
  return {holds = tonumber(holds), fence = tonumber(fence), ttl = tonumber(ttl), wd = wd, until_ms = tonumber(until_ms),
    owner = owner}
end

-- Live events (lockcore/events.go). A lock is watched while some gateway replica streams its
-- events: that replica keeps the hash <lock key>:watch, replica -> until when it watches (ms, Redis
-- time), plus :seq (the number of the lock's last event) and :epoch (set when the hash is made, so
-- that a stream notices a hash made anew). Scripts derive the hash's name from the lock's key
-- rather than taking it as a KEY: it shares the lock's hash tag, so it lives in the lock's Cluster
-- slot, and a KEY would widen every script's contract and every caller (and the uncontended fast
-- paths, see core.lua) for a key that is absent unless someone watches. Unwatched, an event costs
-- one EXISTS and publishes nothing.
local function watched()
  return redis.call('EXISTS', lock .. ':watch') == 1
end

-- notify sends event typ about holds to every replica watching the lock, on its grants channel
-- (see publish): typ is 'g' (granted), 'h' (handed to a waiter), 'r' (released), 'e' (expired),
-- 'f' (forced), 'w' (the waiters changed) or 't' (the holds' TTLs were set anew: a renewal, a
-- re-entry, a confirmed hand-off; streams only move their expiry estimates, see lockcore/events.go);
-- each hold is {fence, mode ('x'|'s'), ttl_ms, owner}.
-- The message is "v <lock key> <epoch> <seq> <typ> <live waiters> <now_ms>", then a line
-- "<fence> <mode> <ttl_ms> <owner>" per hold (owners are printable: no newline). Entries of
-- replicas that stopped watching are dropped on the way.
local function notify(typ, holds)
  local watch = lock .. ':watch'
  if redis.call('EXISTS', watch) == 0 then
    return
  end
  local now = now_ms()
  local fields = redis.call('HGETALL', watch)
  local epoch, replicas = '0', {}
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f == ':epoch' then
      epoch = fields[i + 1]
    elseif string.sub(f, 1, 1) ~= ':' then
      if tonumber(fields[i + 1]) >= now then
        replicas[#replicas + 1] = f
      else
        redis.call('HDEL', watch, f)
      end
    end
  end
  local seq = redis.call('HINCRBY', watch, ':seq', 1)
  local lines = {string.format('v %s %s %d %s %d %d', lock, epoch, seq, typ, redis.call('ZCOUNT', qd, now, '+inf'), now)}
  for _, h in ipairs(holds or {}) do
    lines[#lines + 1] = string.format('%d %s %d ', h[1] or 0, h[2], h[3]) .. (h[4] or '')
  end
  local msg = table.concat(lines, '\n')
  for _, r in ipairs(replicas) do
    publish(r, msg)
  end
end

-- reclaim drops shared holders whose lease ran out (a thousand at a time), telling watchers.
local function reclaim()
  local gone = redis.call('ZRANGEBYSCORE', sh, '-inf', now_ms(), 'LIMIT', 0, chunk)
  if #gone > 0 then
    local expired
    if watched() then
      expired = {}
      for _, raw in ipairs(redis.call('HMGET', shm, unpack(gone))) do
        if raw then
          local m = unpack_meta(raw)
          expired[#expired + 1] = {m.fence, 's', 0, m.owner}
        end
      end
    end
    redis.call('ZREM', sh, unpack(gone))
    redis.call('HDEL', shm, unpack(gone))
    if expired then
      notify('e', expired)
    end
  end
end

-- shared_hold returns lease's shared hold ({holds, fence, ttl, wd, until_ms, owner, left}), or
-- nil when it has none (or it ran out).
local function shared_hold(lease)
  local expiry = tonumber(redis.call('ZSCORE', sh, lease))
  if not expiry or expiry <= now_ms() then
    return nil
  end
  local raw = redis.call('HGET', shm, lease)
  if not raw then
    return nil
  end
  local m = unpack_meta(raw)
  m.left = expiry - now_ms()
  return m
end

-- size is a semaphore's number of permits (nil when unknown).
local function size()
  return tonumber(redis.call('HGET', shm, ':size'))
end

-- fits says whether a new hold of mode ('x' or 's') fits beside the current holders; n is the
-- semaphore size the request names (used when Redis lost the recorded one).
local function fits(mode, n)
  if kind == 's' then
    reclaim()
    return redis.call('ZCARD', sh) < (size() or tonumber(n) or 0)
  end
  if redis.call('EXISTS', lock) == 1 then
    return false
  end
  if mode == 's' or redis.call('EXISTS', sh) == 0 then
    return true
  end
  reclaim()
  return redis.call('EXISTS', sh) == 0
end

-- busy_ms is how long until the earliest current hold runs out (-2: nothing holds): when a waiter
-- should look again, an expiry publishing nothing by itself.
local function busy_ms()
  local best = redis.call('PTTL', lock)
  local first = redis.call('ZRANGE', sh, 0, 0, 'WITHSCORES')
  if first[2] then
    local left = math.max(tonumber(first[2]) - now_ms(), 0)
    if best < 0 or left < best then
      best = left
    end
  end
  return best
end

-- grant gives lease a new hold of mode ('x' exclusive, 's' shared) with a new fence (see
-- next_fence in core.lua), for pexpire_ms; returns the fence. A watchdog lease (wd '1') records
-- when the watchdog stops renewing it (until: grant + hold_ms, Redis ms).
local function grant(lease, mode, owner, ttl, wd, hold_ms, pexpire_ms)
  if mode ~= 's' then
    return grant_exclusive(lock, fencekey, lease, owner, ttl, wd, hold_ms, pexpire_ms)
  end
  local fence = next_fence(fencekey)
  local hold_until = 0
  if wd == '1' then
    hold_until = now_ms() + tonumber(hold_ms)
  end
  redis.call('ZADD', sh, now_ms() + tonumber(pexpire_ms), lease)
  redis.call('HSET', shm, lease, pack(1, fence, ttl, wd, hold_until, owner))
  extend(sh, pexpire_ms)
  extend(shm, pexpire_ms)
  return fence
end

-- set_shared_ttl gives lease's shared hold m a TTL of ttl ms from now (holds: its new count).
local function set_shared_ttl(lease, m, ttl, holds)
  redis.call('ZADD', sh, 'XX', now_ms() + ttl, lease)
  redis.call('HSET', shm, lease, pack(holds or m.holds, m.fence, ttl, m.wd, m.until_ms, m.owner))
  extend(sh, ttl)
  extend(shm, ttl)
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
  if kind == 's' then
    extend(shm, queue_ttl_ms) -- a semaphore's size lives as long as anyone waits
  end
end

-- prune drops up to 100 queue entries whose liveness deadline has passed.
local function prune()
  local dead = redis.call('ZRANGEBYSCORE', qd, '-inf', '(' .. math.floor(now_us() / 1000), 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREM', qd, unpack(dead))
    redis.call('HDEL', qm, unpack(dead))
    notify('w')
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

-- promote hands holds to the waiters at the head of the line while they fit: the first waiter, and
-- after a shared one every shared one behind it (a semaphore: while permits are free). Each gets
-- its hold for claim_ms and one message on its replica's channel (chanprefix .. replica),
-- "g <lease> <fence>"; the next waiter's replica gets an expiry hint. The waiter's replica extends
-- the claim to the waiter's TTL, or passes it on if the waiter left. Returns how many it granted.
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
      local fence = grant(head, mode, m.o, m.t, m.w, m.h, claim_ms)
      publish(m.r, 'g ' .. head .. ' ' .. string.format('%d', fence))
      notify('h', {{fence, mode, claim_ms, m.o}})
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
