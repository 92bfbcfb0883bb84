-- dequeue.lua (+ lib.lua): a waiter gives up (its wait ran out or its client left).
--   KEYS and ARGV[1..4] as in lib.lua, then ARGV[5] = lease
--   => {1, now_ms}        the lock had already been handed to lease: it was passed on to the next
--                         waiter (or freed), so a grant never lands on someone who has gone
--    | {0, pttl, now_ms}  lease left the queue; pttl is the lock's remaining TTL (-2: free)
--   now_ms is Redis time, from which the caller dates its queue ticket.
local lease = ARGV[5]
local now = now_us()
local now_ms = math.floor(now / 1000)

dequeue(lease)
if redis.call('HEXISTS', lock, lease) == 1 then
  redis.call('DEL', lock)
  promote(now)
  return {1, now_ms}
end
local pttl = redis.call('PTTL', lock)
if pttl == -2 and promote(now) then
  -- The holder expired and nobody had handed the lock on yet.
  pttl = claim_ms
end
return {0, pttl, now_ms}
