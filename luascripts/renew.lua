-- renew.lua (+ lib.lua): KEYS = [lock, q, qm]  ARGV = [lease, ttl_ms (0 = keep the lease's ttl), chanprefix]
--   => {holds, fence, ttl_ms, watchdog}  lease held: TTL set to ttl_ms
--    | {0}                               lease does not hold the lock; nothing changed (never resurrects)
-- Also confirms a lock handed to a waiter. With others waiting, the next one's replica is told
-- when the lease now runs out.
local lock, q, qm = KEYS[1], KEYS[2], KEYS[3]
local lease, ttl, chanprefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]

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
if redis.call('EXISTS', q) == 1 then
  hint(lock, q, qm, chanprefix)
end
local meta = redis.call('HMGET', lock, ':fence', ':wd')
return {holds, tonumber(meta[1]), ttl, tonumber(meta[2])}
