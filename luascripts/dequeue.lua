-- dequeue.lua (+ lib.lua): a waiter gives up (its wait ran out, its client left, its gateway closes).
--   KEYS as in lib.lua, then KEYS[9] = the key of the queue ticket to hand out;
--   ARGV[1..6] as in lib.lua, then ARGV[7..9] = [lease, ticket_ms (0: no ticket), arrival_us (the
--   waiter's arrival as its gateway knows it, used when Redis lost the entry; 0: unknown)]
--   => {1, ticketed}        a hold had already been handed to lease: it was passed on to the
--                           next waiters (or freed), so a grant never lands on someone who has gone
--    | {0, ms, ticketed}    lease left the queue; ms is how long until the earliest hold runs out
--                           (-2: nothing holds)
--   ticketed is 1 when the waiter's arrival was kept under KEYS[9] for ticket_ms, for its next
--   waiting acquire to resume (see acquire.lua).
local lease, ticket_ms, arrival = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])

local ticketed = 0
if ticket_ms > 0 then
  arrival = tonumber(redis.call('ZSCORE', q, lease)) or arrival
  if arrival > 0 then
    redis.call('SET', KEYS[9], string.format('%d', arrival), 'PX', ticket_ms)
    ticketed = 1
  end
end
dequeue(lease)
notify('w')
local handed = false
if kind == 'l' and redis.call('HEXISTS', lock, lease) == 1 then
  local v = redis.call('HMGET', lock, ':fence', ':owner')
  redis.call('DEL', lock)
  notify('r', {{tonumber(v[1]), 'x', 0, v[2]}})
  handed = true
end
local m = shared_hold(lease)
if m then
  redis.call('ZREM', sh, lease)
  redis.call('HDEL', shm, lease)
  notify('r', {{m.fence, 's', 0, m.owner}})
  handed = true
end
if handed then
  promote()
  return {1, ticketed}
end
-- A holder may have expired with nobody handing its place on yet.
if promote() > 0 then
  return {0, claim_ms, ticketed}
end
return {0, busy_ms(), ticketed}
