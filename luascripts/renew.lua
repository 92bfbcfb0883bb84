-- renew.lua: KEYS = [lock]  ARGV = [lease, ttl_ms (0 = keep the lease's ttl)]
--   => {holds, fence, ttl_ms, watchdog}  lease held: TTL set to ttl_ms
--    | {0}                               lease does not hold the lock; nothing changed (never resurrects)
local lock, lease = KEYS[1], ARGV[1]
local ttl = tonumber(ARGV[2])

local holds = tonumber(redis.call('HGET', lock, lease))
if not holds then
  return {0}
end
if ttl == 0 then
  ttl = tonumber(redis.call('HGET', lock, ':ttl'))
else
  redis.call('HSET', lock, ':ttl', ARGV[2])
end
redis.call('PEXPIRE', lock, ttl)
local meta = redis.call('HMGET', lock, ':fence', ':wd')
return {holds, tonumber(meta[1]), ttl, tonumber(meta[2])}
