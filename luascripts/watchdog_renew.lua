-- watchdog_renew.lua: renews one watchdog lease when its schedule says it is due.
--   KEYS = [lock]  ARGV = [lease]
--   => {1, due_ms}  renewed to its TTL; the next renewal is due at due_ms (Redis time, ttl/3 on)
--    | {0}          drop the duty: the lease no longer holds the lock, is no watchdog lease, or
--                   is past its max hold (it then runs out its last TTL). Never resurrects.
local lock, lease = KEYS[1], ARGV[1]

local v = redis.call('HMGET', lock, lease, ':wd', ':until', ':ttl')
if not v[1] or v[2] ~= '1' then
  return {0}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now_ms >= tonumber(v[3]) then
  return {0}
end
local ttl = tonumber(v[4])
redis.call('PEXPIRE', lock, ttl)
return {1, now_ms + math.floor(ttl / 3)}
