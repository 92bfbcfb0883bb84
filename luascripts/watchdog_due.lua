-- watchdog_due.lua (read-only): whether a watchdog schedule shard has a renewal due, by the clock
-- of the node holding it (Redis Cluster, where TIME read apart would come from any node).
--   KEYS = [leases' schedule, multi-locks' schedule] (one hash tag)  => {0|1, 0|1}
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reply = {0, 0}
for i = 1, 2 do
  local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) <= now_ms then
    reply[i] = 1
  end
end
return reply
