-- dequeue.lua (+ lib.lua): a waiter gives up (its wait ran out, its client left, its gateway closes).
--   KEYS as in lib.lua, then KEYS[6] = the key of the queue ticket to hand out;
--   ARGV[1..4] as in lib.lua, then ARGV[5..7] = [lease, ticket_ms (0: no ticket), arrival_us (the
--   waiter's arrival as its gateway knows it, used when Redis lost the entry; 0: unknown)]
--   => {1, ticketed}        the lock had already been handed to lease: it was passed on to the
--                           next waiter (or freed), so a grant never lands on someone who has gone
--    | {0, pttl, ticketed}  lease left the queue; pttl is the lock's remaining TTL (-2: free)
--   ticketed is 1 when the waiter's arrival was kept under KEYS[6] for ticket_ms, for its next
--   waiting acquire to resume (see acquire.lua).
local lease, ticket_ms, arrival = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])

local ticketed = 0
if ticket_ms > 0 then
  arrival = tonumber(redis.call('ZSCORE', q, lease)) or arrival
  if arrival > 0 then
    redis.call('SET', KEYS[6], string.format('%d', arrival), 'PX', ticket_ms)
    ticketed = 1
  end
end
dequeue(lease)
if redis.call('HEXISTS', lock, lease) == 1 then
  redis.call('DEL', lock)
  promote()
  return {1, ticketed}
end
local pttl = redis.call('PTTL', lock)
if pttl == -2 and promote() then
  -- The holder expired and nobody had handed the lock on yet.
  pttl = claim_ms
end
return {0, pttl, ticketed}
