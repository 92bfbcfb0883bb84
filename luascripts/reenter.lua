-- reenter.lua: KEYS = [lock]  ARGV = [lease, ttl_ms]
--   => {holds, fence, watchdog}  lease held: count incremented, TTL reset to ttl_ms
--    | {0}                       lease does not hold the lock (expired or released); nothing changed
local lock, lease, ttl = KEYS[1], ARGV[1], ARGV[2]

if redis.call('HEXISTS', lock, lease) == 0 then
  return {0}
end
local holds = redis.call('HINCRBY', lock, lease, 1)
redis.call('HSET', lock, ':ttl', ttl)
redis.call('PEXPIRE', lock, ttl)
local meta = redis.call('HMGET', lock, ':fence', ':wd')
return {holds, tonumber(meta[1]), tonumber(meta[2])}
