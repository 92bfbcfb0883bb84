-- heartbeat.lua (+ lib.lua): one replica's periodic care of one lock (or semaphore) it has waiters for.
--   KEYS and ARGV[1..6] as in lib.lua, then ARGV[7..] = that replica's waiting leases.
--   It pushes their liveness deadlines and the queue keys' expiry forward, drops dead entries and
--   expired shared holds, hands out what fits to the head of the line (a holder's expiry publishes
--   nothing, so this is how expiry is noticed), and reports:
--   => {ms, n, lease 1, fence 1, ..., lease n, fence n, missing lease...}
--   where ms is how long until the earliest hold runs out (-2: nothing holds), the n leases are
--   the given ones that hold (a grant whose message may have been lost), and the missing leases
--   are the given ones that are neither queued nor holding (e.g. Redis lost the queue in a
--   restart): their replica queues them again at their original arrival.
--   Any number of leases may be given: they are handled in chunks (see lib.lua).
local first, last = 7, #ARGV

if last >= first and redis.call('EXISTS', q) == 1 then
  local deadline = string.format('%d', now_ms() + liveness_ms)
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

reclaim()
promote() -- also drops dead queue entries (see first_live)

local holding = {}
local reply = {busy_ms(), 0}
local function report(lease, fence)
  holding[lease] = true
  reply[#reply + 1] = lease
  reply[#reply + 1] = fence
  reply[2] = reply[2] + 1
end
if kind == 'l' then
  local h = redis.call('HGETALL', lock)
  local holder, fence
  for i = 1, #h, 2 do
    if h[i] == ':fence' then
      fence = tonumber(h[i + 1])
    elseif string.sub(h[i], 1, 1) ~= ':' then
      holder = h[i]
    end
  end
  if holder then
    for i = first, last do
      if ARGV[i] == holder then
        report(holder, fence)
        break
      end
    end
  end
end
local missing = {}
local has_shared = redis.call('EXISTS', sh) == 1
for from = first, last, chunk do
  local to = math.min(from + chunk - 1, last)
  local queued = redis.call('ZMSCORE', q, unpack(ARGV, from, to))
  local held = has_shared and redis.call('ZMSCORE', sh, unpack(ARGV, from, to)) or {}
  for i = from, to do
    local lease = ARGV[i]
    if not holding[lease] and held[i - from + 1] then
      local m = shared_hold(lease)
      if m then
        report(lease, m.fence)
      end
    end
  end
  for i = from, to do
    if not queued[i - from + 1] and not holding[ARGV[i]] then
      missing[#missing + 1] = ARGV[i]
    end
  end
end
for _, lease in ipairs(missing) do
  reply[#reply + 1] = lease
end
return reply
