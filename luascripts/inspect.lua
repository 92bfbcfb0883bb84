-- inspect.lua (read-only): KEYS = [lock]  ARGV = []
--   => {}                                              free
--    | {lease, owner, fence, holds, pttl, watchdog}    held
local lock = KEYS[1]

local h = redis.call('HGETALL', lock)
if #h == 0 then
  return {}
end
local lease, holds, meta = '', 0, {}
for i = 1, #h, 2 do
  if string.sub(h[i], 1, 1) == ':' then
    meta[h[i]] = h[i + 1]
  else
    lease, holds = h[i], tonumber(h[i + 1])
  end
end
return {lease, meta[':owner'], tonumber(meta[':fence']), holds, redis.call('PTTL', lock), tonumber(meta[':wd'])}
