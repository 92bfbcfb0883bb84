-- acquire.lua (+ lib.lua): KEYS = [lock, fence, q, qd, qm]
--   ARGV = [lease, ttl_ms, owner, watchdog (0|1), mode ('try'|'wait'), replica, liveness_ms,
--           claim_ms, chanprefix, score (arrival µs to keep on a re-queue; 0 = now), max_hold_ms]
--   => {1, fence}         granted to lease: the lock was free and nobody live was queued ahead
--    | {0, pttl}          held (by another lease, or just handed to the queue head); try mode
--    | {2, pttl, score}   queued behind the holder (wait mode); score is the arrival to keep
-- No barging: a free lock with live waiters goes to the queue head, not to the caller.
-- A fence is max(last fence + 1, Redis time in microseconds): strictly increasing while the fence
-- key survives, and still increasing after it is lost as long as the Redis clock moves forward.
local lock, fencekey, q, qd, qm = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lease, ttl, owner, wd, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local replica, liveness, claim, chanprefix = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local hold = ARGV[11]

local now = now_us()
local pttl = redis.call('PTTL', lock)
if pttl == -2 then
  local queued = redis.call('EXISTS', q) == 1
  if queued then
    prune(q, qd, qm, now)
  end
  local head = queued and redis.call('ZRANGE', q, 0, 0)[1]
  if not head or head == lease then
    if head then
      dequeue(q, qd, qm, lease)
    end
    return {1, grant(lock, fencekey, lease, owner, ttl, wd, hold, ttl, now)}
  end
  promote(lock, fencekey, q, qd, qm, chanprefix, claim, now)
  pttl = claim
end
if mode ~= 'wait' then
  return {0, pttl}
end

local score = tonumber(ARGV[10])
if score == 0 then
  score = now
end
redis.call('ZADD', q, 'NX', string.format('%d', score), lease)
redis.call('ZADD', qd, string.format('%d', math.floor(now / 1000) + liveness), lease)
redis.call('HSET', qm, lease, cjson.encode({r = replica, o = owner, t = ttl, w = wd, h = hold}))
return {2, pttl, tonumber(redis.call('ZSCORE', q, lease))}
