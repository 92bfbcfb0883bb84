-- release.lua: KEYS = [lock]  ARGV = [lease, channel]
--   => {-1}     lease does not hold the lock; nothing changed
--    | {holds}  count decremented; 0 means the lock was deleted and 'released' published on channel
local lock, lease, channel = KEYS[1], ARGV[1], ARGV[2]

if redis.call('HEXISTS', lock, lease) == 0 then
  return {-1}
end
local holds = redis.call('HINCRBY', lock, lease, -1)
if holds > 0 then
  return {holds}
end
redis.call('DEL', lock)
redis.call('PUBLISH', channel, 'released')
return {0}
