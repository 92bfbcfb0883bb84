-- release.lua (+ lib.lua): KEYS = [lock, fence, q, qd, qm]  ARGV = [lease, claim_ms, chanprefix]
--   => {-1}              lease does not hold the lock; nothing changed
--    | {holds}           count decremented, still held
--    | {0, watchdog}     fully released: the lock went to the first live waiter (see promote in
--                        lib.lua) or, with nobody waiting, was deleted; watchdog is 1 when the
--                        lease had a watchdog duty, which the caller drops
local lock, fencekey, q, qd, qm = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lease, claim, chanprefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local holds = tonumber(redis.call('HGET', lock, lease))
if not holds then
  return {-1}
end
if holds > 1 then
  return {redis.call('HINCRBY', lock, lease, -1)}
end
local wd = tonumber(redis.call('HGET', lock, ':wd'))
redis.call('DEL', lock)
if redis.call('EXISTS', q) == 1 then
  promote(lock, fencekey, q, qd, qm, chanprefix, claim, now_us())
end
return {0, wd}
