-- renew.lua (+ lib.lua): KEYS as in lib.lua; ARGV[1..6] as in lib.lua, then
--   ARGV[7..8] = [lease, ttl_ms (0 = keep the lease's ttl)]
--   => {holds, fence, ttl_ms, watchdog, shared, used, size}  lease held: TTL set to ttl_ms (every
--                                        hold it has; the figures are its exclusive hold's when it
--                                        has one, shared = 0, else its shared hold's, shared = 1);
--                                        used and size: a semaphore's permits in use and its size
--                                        (0 for a lock)
--    | {0}                               lease holds nothing; nothing changed (never resurrects)
-- Also confirms a hold handed to a waiter. With others waiting, the first one's replica is told
-- when the holds now run out. While the lock is watched, its watchers are told the new TTLs
-- (notify 't'; unwatched, that costs one EXISTS). A renewal is idempotent by nature (a retry sets the same TTL, from a
-- little later, and never revives a lease), so it keeps no Idempotency-Key record: a retry after the
-- lease is gone answers {0}, the truth.
local lease, ttl = ARGV[7], tonumber(ARGV[8])

local reply
local ttls = {} -- the holds renewed, for notify
local holds = kind == 'l' and tonumber(redis.call('HGET', lock, lease))
if holds then
  local x_ttl = ttl
  if ttl == 0 then
    x_ttl = tonumber(redis.call('HGET', lock, ':ttl'))
  else
    redis.call('HSET', lock, ':ttl', ARGV[8])
  end
  redis.call('PEXPIRE', lock, x_ttl)
  local meta = redis.call('HMGET', lock, ':fence', ':wd', ':owner')
  reply = {holds, tonumber(meta[1]), x_ttl, tonumber(meta[2]), 0, 0, 0}
  ttls = {{tonumber(meta[1]), 'x', x_ttl, meta[3]}}
end
local m = redis.call('EXISTS', sh) == 1 and shared_hold(lease)
if m then
  local s_ttl = ttl
  if ttl == 0 then
    s_ttl = m.ttl
  end
  set_shared_ttl(lease, m, s_ttl)
  reply = reply or {m.holds, m.fence, s_ttl, tonumber(m.wd), 1, 0, 0}
  ttls[#ttls + 1] = {m.fence, 's', s_ttl, m.owner}
end
if not reply then
  return {0}
end
notify('t', ttls)
if kind == 's' then
  reply[6] = redis.call('ZCARD', sh)
  reply[7] = size() or 0
end
if redis.call('EXISTS', q) == 1 then
  hint()
end
return reply
