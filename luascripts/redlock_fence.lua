-- redlock_fence.lua: RedLock mode (lockcore/redlock.go) raises one master's fence floor of a lock
-- (the last fence granted in the lock's hash slot) to the fence a majority granted, so that any
-- later majority, which shares a master with this one, gives a greater fence.
--   KEYS = [lock, fence floor, shm] (see lib.lua)  ARGV = [lease, fence, fence_ttl_ms]
--   => 1. The floor is raised to fence (never lowered); lease's holds on this master, if any,
--   carry fence from now on.
local lock, fencekey, shm = KEYS[1], KEYS[2], KEYS[3]
local lease, fence = ARGV[1], ARGV[2]
if tonumber(redis.call('GET', fencekey) or '0') < tonumber(fence) then
  redis.call('SET', fencekey, fence, 'PX', ARGV[3])
end
if redis.call('HEXISTS', lock, lease) == 1 then
  redis.call('HSET', lock, ':fence', fence)
end
local raw = redis.call('HGET', shm, lease)
if raw then
  local holds, rest = string.match(raw, '^(%d+) %d+ (.*)$')
  if holds then
    redis.call('HSET', shm, lease, holds .. ' ' .. fence .. ' ' .. rest)
  end
end
return 1
