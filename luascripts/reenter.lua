-- reenter.lua (+ lib.lua): KEYS and ARGV[1..4] as in lib.lua, then ARGV[5..6] = [lease, ttl_ms]
--   => {holds, fence, watchdog}  lease held: count incremented, TTL reset to ttl_ms
--    | {0}                       lease does not hold the lock (expired or released); nothing changed
-- With others waiting, the first one's replica is told when the lease now runs out.
local lease, ttl = ARGV[5], ARGV[6]

if redis.call('HEXISTS', lock, lease) == 0 then
  return {0}
end
local holds = redis.call('HINCRBY', lock, lease, 1)
redis.call('HSET', lock, ':ttl', ttl)
redis.call('PEXPIRE', lock, ttl)
if redis.call('EXISTS', q) == 1 then
  hint()
end
local meta = redis.call('HMGET', lock, ':fence', ':wd')
return {holds, tonumber(meta[1]), tonumber(meta[2])}
