-- heartbeat.lua (+ lib.lua): one replica's periodic care of one lock it has waiters for.
--   KEYS and ARGV[1..4] as in lib.lua, then ARGV[5..] = that replica's waiting leases.
--   It pushes their liveness deadlines and the queue keys' expiry forward, drops dead entries,
--   hands a free lock to the queue head (a holder's expiry publishes nothing, so this is how expiry
--   is noticed), and reports:
--   => {holder lease or '', holder fence or 0, pttl (-2: free), missing lease...}
--   where the missing leases are the given ones that are neither queued nor holding (e.g. Redis
--   lost the queue in a restart): their replica queues them again at their original arrival.
--   Any number of leases may be given: they are handled in chunks (see lib.lua).
local first, last = 5, #ARGV

if last >= first and redis.call('EXISTS', q) == 1 then
  local deadline = string.format('%d', math.floor(now_us() / 1000) + liveness_ms)
  for from = first, last, chunk do
    local args = {'XX', 'GT'}
    for i = from, math.min(from + chunk - 1, last) do
      args[#args + 1] = deadline
      args[#args + 1] = ARGV[i]
    end
    redis.call('ZADD', qd, unpack(args))
  end
  keep_queue()
end

local pttl = redis.call('PTTL', lock)
if pttl == -2 then
  promote()
  pttl = redis.call('PTTL', lock)
else
  first_live() -- prune
end

local holder, fence = '', 0
if pttl ~= -2 then
  local h = redis.call('HGETALL', lock)
  for i = 1, #h, 2 do
    if h[i] == ':fence' then
      fence = tonumber(h[i + 1])
    elseif string.sub(h[i], 1, 1) ~= ':' then
      holder = h[i]
    end
  end
end

local reply = {holder, fence, pttl}
for from = first, last, chunk do
  local to = math.min(from + chunk - 1, last)
  local scores = redis.call('ZMSCORE', q, unpack(ARGV, from, to))
  for i = from, to do
    if not scores[i - from + 1] and ARGV[i] ~= holder then
      reply[#reply + 1] = ARGV[i]
    end
  end
end
return reply
