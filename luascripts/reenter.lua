-- reenter.lua (+ lib.lua): KEYS = [lock, q, qm]  ARGV = [lease, ttl_ms, chanprefix]
--   => {holds, fence, watchdog}  lease held: count incremented, TTL reset to ttl_ms
--    | {0}                       lease does not hold the lock (expired or released); nothing changed
-- With others waiting, the next one's replica is told when the lease now runs out.
local lock, q, qm = KEYS[1], KEYS[2], KEYS[3]
local lease, ttl, chanprefix = ARGV[1], ARGV[2], ARGV[3]

if redis.call('HEXISTS', lock, lease) == 0 then
  return {0}
end
local holds = redis.call('HINCRBY', lock, lease, 1)
redis.call('HSET', lock, ':ttl', ttl)
redis.call('PEXPIRE', lock, ttl)
if redis.call('EXISTS', q) == 1 then
  hint(lock, q, qm, chanprefix)
end
local meta = redis.call('HMGET', lock, ':fence', ':wd')
return {holds, tonumber(meta[1]), tonumber(meta[2])}
