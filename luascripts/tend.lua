-- tend.lua (+ lib.lua): one replica's periodic care of one lock it has waiters for.
--   KEYS = [lock, fence, q, qd, qm]  ARGV = [liveness_ms, claim_ms, chanprefix, lease...]
--   The leases are that replica's waiters. tend pushes their liveness deadlines forward, drops dead
--   entries, hands a free lock to the queue head (a holder's expiry publishes nothing, so this is
--   how expiry is noticed), and reports:
--   => {holder lease or '', holder fence or 0, pttl (-2: free), missing lease...}
--   where the missing leases are the given ones that are neither queued nor holding (e.g. Redis
--   lost the queue in a restart): their replica queues them again at their original arrival.
local lock, fencekey, q, qd, qm = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local liveness, claim, chanprefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]

local now = now_us()
local n = #ARGV - 3
if n > 0 then
  local args = {'XX', 'GT'}
  local deadline = string.format('%d', math.floor(now / 1000) + liveness)
  for i = 4, #ARGV do
    args[#args + 1] = deadline
    args[#args + 1] = ARGV[i]
  end
  redis.call('ZADD', qd, unpack(args))
end
if redis.call('EXISTS', q) == 1 then
  prune(q, qd, qm, now)
end

local pttl = redis.call('PTTL', lock)
if pttl == -2 then
  promote(lock, fencekey, q, qd, qm, chanprefix, claim, now)
  pttl = redis.call('PTTL', lock)
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
if n > 0 then
  local scores = redis.call('ZMSCORE', q, unpack(ARGV, 4))
  for i = 1, n do
    if not scores[i] and ARGV[i + 3] ~= holder then
      reply[#reply + 1] = ARGV[i + 3]
    end
  end
end
return reply
