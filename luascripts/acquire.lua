-- acquire.lua: KEYS = [lock, fence]  ARGV = [lease, ttl_ms, owner, watchdog (0|1)]
--   => {1, fence}  granted: the lock was free and now holds lease with count 1
--    | {0, pttl}   held by another lease for pttl more milliseconds
-- A fence is max(last fence + 1, Redis time in microseconds): strictly increasing while the fence
-- key survives, and still increasing after it is lost as long as the Redis clock moves forward.
local lock, fencekey = KEYS[1], KEYS[2]
local lease, ttl, owner, wd = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local pttl = redis.call('PTTL', lock)
if pttl ~= -2 then
  return {0, pttl}
end

local now = redis.call('TIME')
local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
-- Usually the clock has moved on since the last grant and one SET ... GET does it all.
local last = tonumber(redis.call('SET', fencekey, string.format('%d', fence), 'GET') or '0')
if fence <= last then
  fence = last + 1
  redis.call('SET', fencekey, string.format('%d', fence))
end
redis.call('HSET', lock, lease, 1, ':owner', owner, ':fence', string.format('%d', fence), ':ttl', ttl, ':wd', wd)
redis.call('PEXPIRE', lock, ttl)
return {1, fence}
