-- release.lua (+ lib.lua): KEYS as in lib.lua, then KEYS[9] = the Idempotency-Key record;
--   ARGV[1..6] as in lib.lua, then ARGV[7..10] = [lease, idem_ms (0: no key),
--   which ('' = the exclusive hold if the lease has one, else the shared one; 'x'; 's'),
--   here (the calling gateway's replica, whose own waiters it hands holds to itself; '': none)]
--   => {-1}                   lease does not hold (that way); nothing changed
--    | {holds, shared}        count decremented, still held; shared is 1 for a shared hold
--    | {0, watchdog, shared}  that hold is given back: what it leaves fits goes to the waiters at
--                             the head of the line (see promote in lib.lua); watchdog is 1 when
--                             the lease now holds nothing and had a watchdog duty, which the
--                             caller drops, and 2 when the lease still holds the lock the other
--                             way (its shared hold, after a downgrade)
--    | {0, watchdog, shared, lease 1, fence 1, ...}
--                             as above, and holds of the lock went to waiters of here, with their
--                             TTLs (see promote): the caller hands each to its waiter. A retry is
--                             answered the three figures alone: the hand-over is the first call's.
-- A lease that holds a lock both ways gives back its exclusive hold first: it keeps its shared one
-- (a downgrade), so no exclusive waiter gets in between. The releasing lease leaves the queue
-- first, so a hold can never be handed straight back to it. A retry of a release that was applied
-- (same Idempotency-Key) gets the first answer again and changes nothing, so a reentrant lease is
-- never decremented twice.
local lease, idem_ms, which, record = ARGV[7], tonumber(ARGV[8]), ARGV[9], KEYS[9]
if ARGV[10] and ARGV[10] ~= '' then
  here = ARGV[10]
end

local prev = replay(record, idem_ms)
if prev then
  return prev
end

-- after gives the hold's place to the waiters; the lease's watchdog duty ends with its last hold.
local function after(ttl, wd, still_held, shared)
  if redis.call('EXISTS', q) == 1 then
    dequeue(lease)
    promote()
  end
  if still_held then
    wd = 2
  end
  local reply = remember(record, idem_ms, ttl, {0, wd, shared})
  if #handed_here == 0 then
    return reply
  end
  return {0, wd, shared, unpack(handed_here)}
end

if which ~= 's' and kind == 'l' then
  local v = redis.call('HMGET', lock, lease, ':ttl', ':wd', ':fence', ':owner')
  local holds, ttl = tonumber(v[1]), v[2]
  if holds then
    if holds > 1 then
      return remember(record, idem_ms, ttl, {redis.call('HINCRBY', lock, lease, -1), 0})
    end
    redis.call('DEL', lock)
    notify('r', {{tonumber(v[4]), 'x', 0, v[5]}})
    if redis.call('EXISTS', q, sh) == 0 then -- the uncontended path: nobody waits, no shared holds
      return remember(record, idem_ms, ttl, {0, tonumber(v[3]), 0})
    end
    return after(ttl, tonumber(v[3]), shared_hold(lease) ~= nil, 0)
  end
  if which == 'x' then
    return {-1}
  end
end

local m = shared_hold(lease)
if not m then
  return {-1}
end
if m.holds > 1 then
  redis.call('HSET', shm, lease, pack(m.holds - 1, m.fence, m.ttl, m.wd, m.until_ms, m.owner))
  return remember(record, idem_ms, m.ttl, {m.holds - 1, 1})
end
redis.call('ZREM', sh, lease)
redis.call('HDEL', shm, lease)
notify('r', {{m.fence, 's', 0, m.owner}})
return after(m.ttl, tonumber(m.wd), redis.call('HEXISTS', lock, lease) == 1, 1)
