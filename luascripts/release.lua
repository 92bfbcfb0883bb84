-- release.lua (+ lib.lua): KEYS and ARGV[1..4] as in lib.lua, then ARGV[5] = lease
--   => {-1}              lease does not hold the lock; nothing changed
--    | {holds}           count decremented, still held
--    | {0, watchdog}     fully released: the lock went to the first live waiter (see promote in
--                        lib.lua) or, with nobody waiting, was deleted; watchdog is 1 when the
--                        lease had a watchdog duty, which the caller drops
-- The releasing lease leaves the queue first, so the lock can never be handed straight back to it.
local lease = ARGV[5]

local holds = tonumber(redis.call('HGET', lock, lease))
if not holds then
  return {-1}
end
if holds > 1 then
  return {redis.call('HINCRBY', lock, lease, -1)}
end
local wd = tonumber(redis.call('HGET', lock, ':wd'))
redis.call('DEL', lock)
dequeue(lease)
promote(now_us())
return {0, wd}
