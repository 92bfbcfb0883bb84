-- renew.lua (+ lib.lua): KEYS and ARGV[1..4] as in lib.lua, then
--   ARGV[5..6] = [lease, ttl_ms (0 = keep the lease's ttl)]
--   => {holds, fence, ttl_ms, watchdog}  lease held: TTL set to ttl_ms
--    | {0}                               lease does not hold the lock; nothing changed (never resurrects)
-- Also confirms a lock handed to a waiter. With others waiting, the first one's replica is told
-- when the lease now runs out. A renewal is idempotent by nature (a retry sets the same TTL, from a
-- little later, and never revives a lease), so it keeps no Idempotency-Key latch: a retry after the
-- lease is gone answers {0}, the truth.
local lease, ttl = ARGV[5], tonumber(ARGV[6])

local holds = tonumber(redis.call('HGET', lock, lease))
if not holds then
  return {0}
end
if ttl == 0 then
  ttl = tonumber(redis.call('HGET', lock, ':ttl'))
else
  redis.call('HSET', lock, ':ttl', ARGV[6])
end
redis.call('PEXPIRE', lock, ttl)
if redis.call('EXISTS', q) == 1 then
  hint()
end
local meta = redis.call('HMGET', lock, ':fence', ':wd')
return {holds, tonumber(meta[1]), ttl, tonumber(meta[2])}
