-- renew.lua (+ lib.lua): KEYS as in lib.lua, then KEYS[6] = the Idempotency-Key latch;
--   ARGV[1..4] as in lib.lua, then ARGV[5..7] = [lease, ttl_ms (0 = keep the lease's ttl),
--   idem_ms (0: no key)]
--   => {holds, fence, ttl_ms, watchdog}  lease held: TTL set to ttl_ms
--    | {0}                               lease does not hold the lock; nothing changed (never resurrects)
-- Also confirms a lock handed to a waiter. With others waiting, the first one's replica is told
-- when the lease now runs out.
local lease, ttl, idem_ms, latch = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), KEYS[6]

local prev = replay(latch, idem_ms)
if prev then
  return prev
end
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
return remember(latch, idem_ms, ttl, {holds, tonumber(meta[1]), ttl, tonumber(meta[2])})
