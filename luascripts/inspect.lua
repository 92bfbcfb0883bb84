-- inspect.lua (read-only): KEYS = [lock, q, qd]  ARGV = []
--   => {waiters}                                                free; waiters = live queue entries
--    | {waiters, lease, owner, fence, holds, pttl, watchdog, hold_left_ms}    held; hold_left_ms
--      is how much longer the watchdog renews the lease (0 without a watchdog)
local lock, q, qd = KEYS[1], KEYS[2], KEYS[3]

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiters = redis.call('ZCOUNT', qd, now_ms, '+inf')
local h = redis.call('HGETALL', lock)
if #h == 0 then
  return {waiters}
end
local lease, holds, meta = '', 0, {}
for i = 1, #h, 2 do
  if string.sub(h[i], 1, 1) == ':' then
    meta[h[i]] = h[i + 1]
  else
    lease, holds = h[i], tonumber(h[i + 1])
  end
end
local left = 0
if meta[':wd'] == '1' then
  left = math.max(tonumber(meta[':until']) - now_ms, 0)
end
return {waiters, lease, meta[':owner'], tonumber(meta[':fence']), holds, redis.call('PTTL', lock), tonumber(meta[':wd']), left}
