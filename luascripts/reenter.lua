-- reenter.lua (+ lib.lua): KEYS as in lib.lua, then KEYS[6] = the Idempotency-Key latch;
--   ARGV[1..4] as in lib.lua, then ARGV[5..7] = [lease, ttl_ms, idem_ms (0: no key)]
--   => {holds, fence, watchdog, pttl}  lease held: count incremented, TTL reset to ttl_ms (= pttl)
--    | {0}                             lease does not hold the lock (expired or released); nothing changed
-- With others waiting, the first one's replica is told when the lease now runs out. A retry of a
-- re-entry that was applied (same Idempotency-Key) adds no hold: while the lease holds the lock it
-- gets the first answer with the lease's remaining pttl (not the TTL the first answer set, which
-- has partly run); once the lease is gone, {0}.
local lease, ttl, idem_ms, latch = ARGV[5], ARGV[6], tonumber(ARGV[7]), KEYS[6]

if redis.call('HEXISTS', lock, lease) == 0 then
  return {0}
end
local prev = replay(latch, idem_ms)
if prev then
  prev[4] = redis.call('PTTL', lock)
  return prev
end
local holds = redis.call('HINCRBY', lock, lease, 1)
redis.call('HSET', lock, ':ttl', ttl)
redis.call('PEXPIRE', lock, ttl)
if redis.call('EXISTS', q) == 1 then
  hint()
end
local meta = redis.call('HMGET', lock, ':fence', ':wd')
return remember(latch, idem_ms, ttl, {holds, tonumber(meta[1]), tonumber(meta[2]), tonumber(ttl)})
