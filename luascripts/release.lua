-- release.lua: KEYS = [lock]  ARGV = [lease, channel]
--   => {-1}     lease does not hold the lock; nothing changed
--    | {holds}  count decremented; 0 means the lock was deleted and 'released' published on channel
local lock, lease, channel = KEYS[1], ARGV[1], ARGV[2]

local holds = tonumber(redis.call('HGET', lock, lease))
if not holds then
  return {-1}
end
if holds > 1 then
  return {redis.call('HINCRBY', lock, lease, -1)}
end
redis.call('DEL', lock)
redis.call('PUBLISH', channel, 'released')
return {0}
