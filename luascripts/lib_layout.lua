-- lib_layout.lua (part of lib.lua, and of watchdog_renew.lua): how a lock's holds are laid out in
-- Redis. The gateway's own keys (see lib.lua) always hold the truth about its leases. A lock whose
-- name is shared with Redisson (lockcore/layout.go chooses, per name, in one place) also keeps
-- Redisson's object of the same name, rs, in Redisson's own format, so that Redisson clients see
-- the gateway's holders and the gateway sees theirs. layout is '' or '-' (the gateway's keys
-- alone: every function here returns at once), 'r' (rs is a Redisson RLock) or 'w' (rs is a
-- Redisson RReadWriteLock). Before this file: lock, sh, rs, layout, sharded (on Redis Cluster)
-- and now_ms().
--
-- The gateway's holds appear in rs as holders of their own, with a count of 1 (never a large
-- number in rs: Redisson's read-unlock script reads every numeric field as a count of read holds):
--   RLock           field 'leasegate:exclusive' while a gateway lease holds the lock
--   RReadWriteLock  'mode' (read|write); 'leasegate:exclusive:write' while a gateway lease holds it
--                   exclusively; 'leasegate:shared' while gateway leases hold it shared, with the
--                   read hold's key {N}:leasegate:shared:rwlock_timeout:1 expiring with the last of
--                   them (Redisson's read-unlock script keeps rs alive while such a key lives)
-- rs expires exactly when the gateway's holds run out (PEXPIREAT of their expiry), or later while
-- Redisson's own holders hold longer. Redisson's fences, queues and metadata stay in the gateway's
-- keys beside rs, in rs's Cluster slot.
local redisson_x, redisson_w, redisson_s = 'leasegate:exclusive', 'leasegate:exclusive:write', 'leasegate:shared'

local function redisson_layout()
  return layout == 'r' or layout == 'w'
end

-- redisson_channel is RedissonObject.prefixName(p, N): p:{N}, or p:N when N holds a '{'.
local function redisson_channel(p)
  if string.find(rs, '{', 1, true) then
    return p .. ':' .. rs
  end
  return p .. ':{' .. rs .. '}'
end

-- redisson_read_timeout is the key of the gateway's read hold in rs (RedissonReadLock's
-- getReadWriteTimeoutNamePrefix, hold 1): {N}:leasegate:shared:rwlock_timeout:1.
local function redisson_read_timeout()
  local base = '{' .. rs .. '}'
  if string.find(rs, '{', 1, true) then
    base = rs
  end
  return base .. ':' .. redisson_s .. ':rwlock_timeout:1'
end

-- redisson_announce tells Redisson's waiters on rs that it may be free, as Redisson's own unlock
-- does, on its channel, by PUBLISH and, on Redis Cluster, by SPUBLISH too: Redisson 3.22+ listens
-- there with SSUBSCRIBE, older Redisson and node-redisson with SUBSCRIBE, and neither hears the
-- other's kind. An RLock's message is '0' (one more try for one waiter per client). A read-write
-- lock's is '1' (every wait blocked now looks again) and then '0': Redisson's '1' wakes only waits
-- already blocked, and a waiter between its subscription and its wait (or between two tries)
-- missed it until its hold's TTL (seen: 5 s, the hold's TTL); the '0' leaves it one more try.
local function redisson_announce()
  local channel, msgs = redisson_channel('redisson_rwlock'), {'1', '0'}
  if layout == 'r' then
    channel, msgs = redisson_channel('redisson_lock__channel'), {'0'}
  end
  for _, msg in ipairs(msgs) do
    redis.call('PUBLISH', channel, msg)
    if sharded then
      redis.call('SPUBLISH', channel, msg)
    end
  end
end

-- redisson_holders counts rs's holders that are not the gateway's (Redisson's own clients).
local function redisson_holders()
  local n = 0
  for _, f in ipairs(redis.call('HKEYS', rs)) do
    if f ~= 'mode' and f ~= redisson_x and f ~= redisson_w and f ~= redisson_s then
      n = n + 1
    end
  end
  return n
end

-- foreign says whether Redisson's own holders of rs keep out a new gateway hold of mode ('x' or
-- 's'): any of them keeps out an exclusive hold; a Redisson writer keeps out a shared one.
local function foreign(mode)
  if not redisson_layout() or redis.call('EXISTS', rs) == 0 then
    return false
  end
  if layout == 'r' then
    return redis.call('HEXISTS', rs, redisson_x) == 0
  end
  if mode == 's' then
    local m = redis.call('HGET', rs, 'mode')
    if m == 'read' then
      return false
    elseif m == 'write' then
      return redis.call('HEXISTS', rs, redisson_w) == 0
    end
    return redisson_holders() > 0 -- no mode: not a read-write lock's hash (an RLock's), which excludes
  end
  return redisson_holders() > 0
end

-- foreign_ms is how long Redisson's holders of rs may still hold it (-2: none, or none that
-- keeps out a hold of mode).
local function foreign_ms(mode)
  if foreign(mode) then
    return redis.call('PTTL', rs)
  end
  return -2
end

-- expire_rs makes rs expire at at (ms, Redis time), or later while Redisson's holders are in it.
local function expire_rs(at)
  if at <= 0 then
    return
  end
  if redisson_holders() > 0 and redis.call('PEXPIRETIME', rs) >= at then
    return
  end
  redis.call('PEXPIREAT', rs, at)
end

-- mirror_rlock writes the gateway's exclusive hold into rs (an RLock), or takes it out, telling
-- Redisson's waiters when that frees rs.
local function mirror_rlock()
  local at = redis.call('PEXPIRETIME', lock)
  if at ~= -2 then
    redis.call('HSET', rs, redisson_x, 1)
    expire_rs(at)
  elseif redis.call('HDEL', rs, redisson_x) == 1 and redis.call('EXISTS', rs) == 0 then
    redisson_announce()
  end
end

-- mirror_rwlock writes the gateway's holds into rs (an RReadWriteLock): its exclusive hold as a
-- writer, its shared holds as one reader whose read hold expires with the last of them; and takes
-- them out, telling Redisson's waiters what that frees ('1' when a gateway writer left: every
-- waiter looks again; '0' when rs is free).
local function mirror_rwlock()
  local xat = redis.call('PEXPIRETIME', lock)
  local top = redis.call('ZRANGE', sh, -1, -1, 'WITHSCORES')
  local sat = top[2] and tonumber(top[2])
  if sat and sat <= now_ms() then
    sat = nil
  end
  local had = redis.call('HMGET', rs, redisson_w, redisson_s)
  if xat == -2 and not sat and not had[1] and not had[2] then
    return -- nothing of the gateway's in rs, before or now
  end
  if xat ~= -2 then
    redis.call('HSET', rs, 'mode', 'write', redisson_w, 1)
  elseif had[1] then
    redis.call('HDEL', rs, redisson_w)
  end
  local timeout = redisson_read_timeout()
  if sat then
    redis.call('HSET', rs, redisson_s, 1)
    redis.call('SET', timeout, 1, 'PXAT', sat)
    if xat == -2 then
      redis.call('HSET', rs, 'mode', 'read')
    end
  elseif had[2] then
    redis.call('HDEL', rs, redisson_s)
    redis.call('DEL', timeout)
  end
  if redisson_holders() == 0 and xat == -2 and not sat then -- 'mode' alone: nobody holds it
    redis.call('DEL', rs)
    redisson_announce()
    return
  end
  expire_rs(math.max(xat, sat or 0))
  if had[1] and xat == -2 then
    redisson_announce()
  end
end

-- mirror brings rs in line with the gateway's holds of the lock (a no-op in the gateway's own
-- layout). Every script that changes a lock's holds ends with it (see settle in lib.lua).
local function mirror()
  if layout == 'r' then
    mirror_rlock()
  elseif layout == 'w' then
    mirror_rwlock()
  end
end

-- evict_foreign takes Redisson's own holders out of rs (Redisson's forceUnlock: DEL and a '0'
-- message, '1' for a read-write lock so that every waiter looks) and returns them as
-- {field, mode ('x'|'s')}; the gateway's holds are mirrored again by settle.
local function evict_foreign()
  local out = {}
  if not redisson_layout() or redis.call('EXISTS', rs) == 0 then
    return out
  end
  local mode = 'x'
  if layout == 'w' and redis.call('HGET', rs, 'mode') == 'read' then
    mode = 's'
  end
  for _, f in ipairs(redis.call('HKEYS', rs)) do
    if f ~= 'mode' and f ~= redisson_x and f ~= redisson_w and f ~= redisson_s then
      local m = mode
      if layout == 'w' and string.sub(f, -6) ~= ':write' then
        m = 's'
      end
      out[#out + 1] = {f, m}
    end
  end
  if #out > 0 then
    redis.call('DEL', rs)
    redisson_announce()
  end
  return out
end

-- settle is the last step of every script that changes holds (scripts.go wraps their bodies): it
-- mirrors each lock the script took (in KEYS order) into its layout. Nothing to do when no lock
-- of the call is shared with Redisson.
local function settle()
  if #kinds == 1 then
    return
  end
  for i = 1, math.floor(#KEYS / 8) do
    use(i)
    mirror()
  end
end
