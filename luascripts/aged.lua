-- aged.lua: the long-hold sweep's read of one aged zset (see lockcore/long_holds.go).
--   KEYS = [aged]  (zset member -> grant time, ms of Redis time)  ARGV = [age_ms, limit]
--   => {now_ms, member, grant_ms, ...}: up to limit members granted at least age_ms ago, oldest
--      first; in the common case there are none and this costs one O(log n) lookup.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms - tonumber(ARGV[1]), 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[2]))
local out = {now_ms}
for i = 1, #found, 2 do
  out[#out + 1] = found[i]
  out[#out + 1] = tonumber(found[i + 1])
end
return out
