-- dequeue.lua (+ lib.lua): a waiter gives up (its wait ran out or its client left).
--   KEYS = [lock, fence, q, qd, qm]  ARGV = [lease, claim_ms, chanprefix]
--   => {1}        the lock had already been handed to lease: it was passed on to the next waiter
--                 (or freed), so a grant never lands on someone who has gone
--    | {0, pttl}  lease left the queue; pttl is the lock's remaining TTL (-2: free)
local lock, fencekey, q, qd, qm = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lease, claim, chanprefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]

if redis.call('HEXISTS', lock, lease) == 1 then
  redis.call('DEL', lock)
  promote(lock, fencekey, q, qd, qm, chanprefix, claim, now_us())
  return {1}
end
dequeue(q, qd, qm, lease)
local pttl = redis.call('PTTL', lock)
if pttl == -2 then
  -- The holder expired and nobody has promoted the queue yet: do it now.
  if promote(lock, fencekey, q, qd, qm, chanprefix, claim, now_us()) then
    pttl = claim
  end
end
return {0, pttl}
