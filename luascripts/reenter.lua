-- reenter.lua (+ lib.lua): KEYS as in lib.lua, then KEYS[9] = the Idempotency-Key record;
--   ARGV[1..6] as in lib.lua, then ARGV[7..11] = [lease, ttl_ms, idem_ms (0: no key),
--   want ('x' exclusive | 's' shared), permits (a semaphore's size; 0 for a lock)]
--   => {holds, fence, watchdog, pttl, used}  held that way: count incremented, TTL reset to
--                                      ttl_ms (= pttl); used: a semaphore's permits in use
--    | {0}                             lease does not hold (expired or released); nothing changed
--    | {-1}                            a shared holder asked for exclusive: refused (an upgrade
--                                      waits for the other readers, who may wait to upgrade too)
--    | {-2, size}                      a semaphore of size permits, not the request's
-- An exclusive holder asking for shared takes a shared hold beside its exclusive one, under the
-- same fence (its release later keeps the shared hold: a downgrade). With others waiting, the
-- first one's replica is told when the holds now run out. A re-entry of a hold tells the lock's
-- watchers its new TTL (notify 't'; unwatched, that costs one EXISTS). A retry of a re-entry that was applied
-- (same Idempotency-Key) adds no hold: while the lease holds it gets the first answer with the
-- remaining pttl (not the TTL the first answer set, which has partly run); once it is gone, {0}.
local lease, ttl, idem_ms, want, permits, record = ARGV[7], ARGV[8], tonumber(ARGV[9]), ARGV[10], tonumber(ARGV[11]), KEYS[9]

local exclusive = kind == 'l' and redis.call('HEXISTS', lock, lease) == 1
local shared = shared_hold(lease)
if want == 'x' and not exclusive then
  if shared then
    return {-1}
  end
  return {0}
end
if not exclusive and not shared then
  return {0}
end
if kind == 's' then
  local cur = size()
  if cur and cur ~= permits then
    return {-2, cur}
  end
end
local used = 0
if kind == 's' then
  used = redis.call('ZCARD', sh)
end
local prev = replay(record, idem_ms)
if prev then
  if want == 'x' or not shared then
    prev[4] = redis.call('PTTL', lock)
  else
    prev[4] = shared.left
  end
  return prev
end

local reply
if want == 'x' then
  local holds = redis.call('HINCRBY', lock, lease, 1)
  redis.call('HSET', lock, ':ttl', ttl)
  redis.call('PEXPIRE', lock, ttl)
  local meta = redis.call('HMGET', lock, ':fence', ':wd', ':owner')
  reply = {holds, tonumber(meta[1]), tonumber(meta[2]), tonumber(ttl), used}
  notify('t', {{tonumber(meta[1]), 'x', tonumber(ttl), meta[3]}})
elseif shared then
  set_shared_ttl(lease, shared, tonumber(ttl), shared.holds + 1)
  reply = {shared.holds + 1, shared.fence, tonumber(shared.wd), tonumber(ttl), used}
  notify('t', {{shared.fence, 's', tonumber(ttl), shared.owner}})
else -- the exclusive holder takes a shared hold too
  local meta = redis.call('HMGET', lock, ':fence', ':wd', ':until', ':owner')
  redis.call('ZADD', sh, now_ms() + tonumber(ttl), lease)
  redis.call('HSET', shm, lease, pack(1, meta[1], ttl, meta[2], meta[3], meta[4]))
  extend(sh, tonumber(ttl))
  extend(shm, tonumber(ttl))
  reply = {1, tonumber(meta[1]), tonumber(meta[2]), tonumber(ttl), used}
  notify('g', {{tonumber(meta[1]), 's', tonumber(ttl), meta[4]}})
end
if redis.call('EXISTS', q) == 1 then
  hint()
end
return remember(record, idem_ms, ttl, reply)
