-- watchdog_renew.lua: renews one watchdog lease when its schedule says it is due.
--   KEYS = [lock, sh, shm, rs] (see lib.lua)  ARGV = [lease, layout, grants channel prefix]
--   (layout and the prefix as lib.lua's: the renewal is mirrored into a Redisson object, see
--   lib_layout.lua, which comes before this file with core.lua)
--   => {1, due_ms, fence, ttl_ms}  renewed to its TTL (each hold it has: exclusive, shared); the
--                   next renewal is due at due_ms (Redis time, a third of the shortest TTL on);
--                   fence and ttl_ms: the earliest grant's fence among its holds, and the longest
--                   TTL (the long-hold report enters the lease when it may live past its threshold)
--    | {0}          drop the duty: the lease holds nothing, is no watchdog lease, or is past its
--                   max hold (it then runs out its last TTL). Never resurrects.
local lock, sh, shm, lease = KEYS[1], KEYS[2], KEYS[3], ARGV[1]

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local next_due, first_fence, longest_ttl

local v = redis.call('HMGET', lock, lease, ':wd', ':until', ':ttl', ':fence')
if v[1] and v[2] == '1' and now_ms < tonumber(v[3]) then
  local ttl = tonumber(v[4])
  redis.call('PEXPIRE', lock, ttl)
  next_due = now_ms + math.floor(ttl / 3)
  first_fence, longest_ttl = v[5], ttl
end

local expiry = tonumber(redis.call('ZSCORE', sh, lease))
local raw = expiry and expiry > now_ms and redis.call('HGET', shm, lease)
if raw then
  local holds, fence, ttl, wd, until_ms, owner = string.match(raw, '^(%d+) (%d+) (%d+) (%d) (%d+) (.*)$')
  ttl = tonumber(ttl)
  if wd == '1' and now_ms < tonumber(until_ms) then
    redis.call('ZADD', sh, 'XX', now_ms + ttl, lease)
    for _, key in ipairs({sh, shm}) do
      local left = redis.call('PTTL', key)
      if left ~= -2 and left < ttl then
        redis.call('PEXPIRE', key, ttl)
      end
    end
    next_due = math.min(next_due or math.huge, now_ms + math.floor(ttl / 3))
    if not first_fence or tonumber(fence) < tonumber(first_fence) then
      first_fence = fence
    end
    longest_ttl = math.max(longest_ttl or 0, ttl)
  end
end

mirror()
if not next_due then
  return {0}
end
return {1, next_due, tonumber(first_fence), longest_ttl}
