-- duties.lua: the watchdog registry. KEYS = [registry]  (zset "<lock name>\n<lease>" -> due ms)
--   ARGV = ['enroll', member, delay_ms]  => 1: member is due delay_ms from now (Redis time)
--   ARGV = ['claim', hold_ms, limit]     => up to limit due members; each is pushed hold_ms
--                                           forward, so other replicas skip it meanwhile and a
--                                           claimer that fails is retried after hold_ms
local registry, op = KEYS[1], ARGV[1]

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if op == 'enroll' then
  redis.call('ZADD', registry, string.format('%d', now_ms + tonumber(ARGV[3])), ARGV[2])
  return 1
end
local due = redis.call('ZRANGEBYSCORE', registry, '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[3]))
if #due > 0 then
  local args = {'XX'}
  local later = string.format('%d', now_ms + tonumber(ARGV[2]))
  for i = 1, #due do
    args[#args + 1] = later
    args[#args + 1] = due[i]
  end
  redis.call('ZADD', registry, unpack(args))
end
return due
