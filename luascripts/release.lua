-- release.lua (+ lib.lua): KEYS as in lib.lua, then KEYS[6] = the Idempotency-Key latch;
--   ARGV[1..4] as in lib.lua, then ARGV[5..6] = [lease, idem_ms (0: no key)]
--   => {-1}              lease does not hold the lock; nothing changed
--    | {holds}           count decremented, still held
--    | {0, watchdog}     fully released: the lock went to the first live waiter (see promote in
--                        lib.lua) or, with nobody waiting, was deleted; watchdog is 1 when the
--                        lease had a watchdog duty, which the caller drops
-- The releasing lease leaves the queue first, so the lock can never be handed straight back to it.
-- A retry of a release that was applied (same Idempotency-Key) gets the first answer again and
-- changes nothing, so a reentrant lease is never decremented twice.
local lease, idem_ms, latch = ARGV[5], tonumber(ARGV[6]), KEYS[6]

local prev = replay(latch, idem_ms)
if prev then
  return prev
end
local v = redis.call('HMGET', lock, lease, ':ttl', ':wd')
local holds, ttl = tonumber(v[1]), v[2]
if not holds then
  return {-1}
end
if holds > 1 then
  return remember(latch, idem_ms, ttl, {redis.call('HINCRBY', lock, lease, -1)})
end
redis.call('DEL', lock)
-- The queue keys exist only while someone waits (see lib.lua): with none, nothing to dequeue or promote.
if redis.call('EXISTS', q) == 1 then
  dequeue(lease)
  promote()
end
return remember(latch, idem_ms, ttl, {0, tonumber(v[3])})
