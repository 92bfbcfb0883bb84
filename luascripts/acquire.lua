-- acquire.lua (+ lib.lua): KEYS as in lib.lua, then KEYS[6] = a queue ticket's key (wait mode:
--   taken once; a missing key is a newcomer), KEYS[7] = the Idempotency-Key latch;
--   ARGV[1..4] as in lib.lua, then
--   ARGV[5..] = [lease, ttl_ms, owner, watchdog (0|1), mode ('try'|'wait'), replica,
--                arrival_us (to keep when queueing again within one wait; 0 = the ticket's, else
--                now), max_hold_ms, idem_ms (0: no key)]
--   => {1, fence}           granted to lease: the lock was free and nobody live was queued ahead
--    | {3, fence, lease, pttl}  a retry (same Idempotency-Key and owner) of a request that was
--                           granted this lease, which still holds the lock for pttl: nothing changed
--    | {4}                  a retry of a request whose lease no longer holds the lock: nothing changed
--    | {0, pttl}            held (by another lease, or just handed to the queue head); try mode
--    | {2, pttl, arrival}   queued behind the holder (wait mode); arrival is the one to keep
-- No barging: a free lock with live waiters goes to the queue head, not to the caller.
-- A lease that already holds the lock (a retried call whose reply was lost, or a waiter queueing
-- again just as the lock reached it) is granted, never queued behind itself.
local lease, ttl, owner, wd, mode, replica = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local arrival, hold, idem_ms, latch = tonumber(ARGV[11]), ARGV[12], tonumber(ARGV[13]), KEYS[7]

-- The latch of a granted request holds "<lease> <owner>" (lease IDs have no spaces).
local prev = idem_ms > 0 and redis.call('GET', latch)
if prev then
  local prev_lease, prev_owner = string.match(prev, '^(%S+) (.*)$')
  if prev_owner == owner then
    if redis.call('HEXISTS', lock, prev_lease) == 1 then
      dequeue(lease) -- a waiter's earlier call of this request may have queued it
      return {3, tonumber(redis.call('HGET', lock, ':fence')), prev_lease, redis.call('PTTL', lock)}
    end
    return {4}
  end
end

-- granted remembers a new grant for the request's retries, and is its reply.
local function granted(fence)
  if idem_ms > 0 then
    redis.call('SET', latch, lease .. ' ' .. owner, 'PX', math.max(idem_ms, tonumber(ttl)))
  end
  return {1, fence}
end

-- PTTL first: on a free lock (the uncontended path) the lease cannot hold it, so no HEXISTS.
local pttl = redis.call('PTTL', lock)
if pttl ~= -2 and redis.call('HEXISTS', lock, lease) == 1 then
  dequeue(lease)
  redis.call('HSET', lock, ':ttl', ttl)
  redis.call('PEXPIRE', lock, ttl)
  return {1, tonumber(redis.call('HGET', lock, ':fence'))}
end

if mode ~= 'wait' then
  if pttl == -2 then
    if not first_live() then
      return granted(grant(lease, owner, ttl, wd, hold, ttl))
    end
    promote()
    pttl = claim_ms
  end
  return {0, pttl}
end

-- Wait: join the queue first (an earlier arrival is kept), so that a waiter coming back to its
-- place is considered with everyone else when the lock is free.
local now = now_us()
if arrival == 0 then
  arrival = tonumber(redis.call('GETDEL', KEYS[6]) or now)
end
redis.call('ZADD', q, 'NX', string.format('%d', arrival), lease)
redis.call('ZADD', qd, string.format('%d', math.floor(now / 1000) + liveness_ms), lease)
redis.call('HSET', qm, lease, cjson.encode({r = replica, o = owner, t = ttl, w = wd, h = hold}))
keep_queue()
if pttl == -2 then
  if first_live() == lease then
    dequeue(lease)
    return granted(grant(lease, owner, ttl, wd, hold, ttl))
  end
  promote()
  pttl = claim_ms
end
return {2, pttl, tonumber(redis.call('ZSCORE', q, lease))}
