-- lib_holders.lua (part of lib.lua): the holders of a lock or semaphore: granting, shared holds, what fits.

-- A shared holder's entry in shm.
local function pack(holds, fence, ttl, wd, until_ms, owner)
  return string.format('%d %d %d %s %d ', holds, fence, ttl, wd, until_ms) .. owner
end

local function unpack_meta(raw)
  local holds, fence, ttl, wd, until_ms, owner = string.match(raw, '^(%d+) (%d+) (%d+) (%d) (%d+) (.*)$')
  return {holds = tonumber(holds), fence = tonumber(fence), ttl = tonumber(ttl), wd = wd, until_ms = tonumber(until_ms),
    owner = owner}
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
  if redis.call('EXISTS', lock) == 1 or foreign(mode) then
    return false
  end
  if mode == 's' or redis.call('EXISTS', sh) == 0 then
    return true
  end
  reclaim()
  return redis.call('EXISTS', sh) == 0
end

-- busy_ms is how long until the earliest current hold runs out (-2: nothing holds): when a waiter
-- should look again, an expiry publishing nothing by itself. A Redisson holder of a name shared
-- with Redisson counts as a hold (an exclusive one: what it keeps out of a waiter's way).
local function busy_ms()
  local best = redis.call('PTTL', lock)
  local theirs = foreign_ms('s')
  if theirs == -2 then
    theirs = foreign_ms('x')
  end
  if theirs >= 0 and (best < 0 or theirs < best) then
    best = theirs
  end
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
