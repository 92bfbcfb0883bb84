-- acquire.lua (+ lib.lua): KEYS as in lib.lua, then KEYS[9] = a queue ticket's key (wait mode:
--   taken once; a missing key is a newcomer), KEYS[10] = the Idempotency-Key record;
--   ARGV[1..6] as in lib.lua, then
--   ARGV[7..] = [lease, ttl_ms, owner, watchdog (0|1), mode ('try'|'wait'), replica,
--                arrival_us (to keep when queueing again within one wait; 0 = the ticket's, else
--                now), max_hold_ms, idem_ms (0: no key), hold ('x' exclusive | 's' shared),
--                permits (a semaphore's size; 0 for a lock)]
--   => {1, fence, used}     granted to lease: its hold fits and nobody live was queued ahead;
--                           used is a semaphore's permits in use (0 for a lock)
--    | {3, fence, lease, pttl, used}  a retry (same Idempotency-Key and owner) of a request that
--                           was granted this lease, which still holds for pttl: nothing changed
--    | {4}                  a retry of a request whose lease no longer holds: nothing changed
--    | {0, ms}              held (or just handed to the queue head); try mode. ms: until the
--                           earliest hold runs out
--    | {2, ms, arrival}     queued behind the holders (wait mode); arrival is the one to keep
--    | {5, size}            a semaphore that someone holds or waits on has size permits, not
--                           the request's: nothing changed
-- No barging: holds go to the queue head first (see promote in lib.lua), so a shared request
-- queues behind a waiting exclusive one even while other shared holds are in. A lease that already
-- holds (a retried call whose reply was lost, or a waiter queueing again just as a grant reached
-- it) is granted, never queued behind itself.
local lease, ttl, owner, wd, mode, replica = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local arrival, hold, idem_ms, record = tonumber(ARGV[13]), ARGV[14], tonumber(ARGV[15]), KEYS[10]
local want, permits = ARGV[16], tonumber(ARGV[17])

-- used is a semaphore's permits in use (0 for a lock: nobody asks).
local function used()
  if kind == 's' then
    return redis.call('ZCARD', sh)
  end
  return 0
end

-- The record of a granted request holds "<lease> <owner>" (lease IDs have no spaces).
local prev = idem_ms > 0 and redis.call('GET', record)
if prev then
  local prev_lease, prev_owner = string.match(prev, '^(%S+) (.*)$')
  if prev_owner == owner then
    local fence, left = held_by(prev_lease)
    if fence then
      dequeue(lease) -- a waiter's earlier call of this request may have queued it
      return {3, fence, prev_lease, left, used()}
    end
    return {4}
  end
end

-- granted remembers a new grant for the request's retries, and is its reply.
local function granted(fence)
  if idem_ms > 0 then
    redis.call('SET', record, lease .. ' ' .. owner, 'PX', math.max(idem_ms, tonumber(ttl)))
  end
  return {1, fence, used()}
end

-- new_grant gives lease a new hold of the mode it asks for, and tells the lock's watchers.
local function new_grant()
  local fence = grant(lease, want, owner, ttl, wd, hold, ttl)
  notify('g', {{fence, want, tonumber(ttl), owner}})
  return fence
end

-- The uncontended path: nothing holds and nobody waits (one call to know it).
if redis.call('EXISTS', lock, sh, q) == 0 and not foreign(want) then
  if kind == 's' then
    redis.call('HSET', shm, ':size', permits)
  end
  return granted(new_grant())
end

-- confirm turns lease's hold (a claim promote gave it, or a retried grant) into one of ttl ms,
-- and tells the lock's watchers its new TTL. A lease is only ever granted the mode it asks for.
local function confirm()
  local fence, _, held = held_by(lease, want)
  if not fence then
    return nil
  end
  dequeue(lease)
  if held == 'x' then
    redis.call('HSET', lock, ':ttl', ttl)
    redis.call('PEXPIRE', lock, ttl)
  else
    set_shared_ttl(lease, shared_hold(lease), tonumber(ttl))
  end
  notify('t', {{fence, held, tonumber(ttl), owner}})
  return fence
end

local fence = confirm()
if fence then
  return {1, fence, used()}
end

if kind == 's' then
  reclaim()
  local cur = size()
  local busy = redis.call('EXISTS', sh) == 1 or first_live() ~= nil
  if busy and cur and cur ~= permits then
    return {5, cur}
  end
  if not busy or not cur then
    redis.call('HSET', shm, ':size', permits)
  end
end

if mode ~= 'wait' then
  if fits(want, permits) then
    if not first_live() then
      return granted(new_grant())
    end
    promote()
  end
  return {0, busy_ms()}
end

-- Wait: join the queue first (an earlier arrival is kept), so that a waiter coming back to its
-- place is considered with everyone else; then hand out what fits, which may be this waiter's.
local now = now_us()
if arrival == 0 then
  arrival = tonumber(redis.call('GETDEL', KEYS[9]) or gw_us or now) -- gw_us: see core.lua
end
local meta = {r = replica, o = owner, t = ttl, w = wd, h = hold}
if want == 's' then
  meta.m = 's'
end
if kind == 's' then
  meta.n = permits
end
local joined = redis.call('ZADD', q, 'NX', string.format('%d', arrival), lease)
redis.call('ZADD', qd, string.format('%d', math.floor(now / 1000) + liveness_ms), lease)
redis.call('HSET', qm, lease, cjson.encode(meta))
keep_queue()
if joined == 1 then
  notify('w')
end
-- While an exclusive holder is in, nothing fits for anyone: no need to look down the line.
if kind == 's' or redis.call('EXISTS', lock) == 0 then
  promote()
  fence = confirm()
  if fence then
    return granted(fence)
  end
end
return {2, busy_ms(), tonumber(redis.call('ZSCORE', q, lease))}
