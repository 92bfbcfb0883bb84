-- watch.lua: a gateway replica keeps watching a lock (or semaphore) for live events, or stops.
--   KEYS = [watch] (the lock's key .. ':watch', see notify in lib.lua)
--   ARGV = [op ('keep' | 'drop'), replica, ttl_ms]
--   keep => 1 when the replica's entry was missing (it ran out, or Redis lost the hash): the
--           lock's events were not sent to it meanwhile; else 0. The entry then lasts ttl_ms more
--           (so does the hash), and entries of replicas that stopped keeping theirs are dropped.
--   drop => 0: the replica's entry is gone, and the hash too once nobody watches, so that the
--           lock's scripts and its uncontended fast paths stop publishing and looking.
local watch, op, replica, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if op == 'drop' then
  redis.call('HDEL', watch, replica)
end
local fields = redis.call('HGETALL', watch)
local missing, others = 1, 0
for i = 1, #fields, 2 do
  local f = fields[i]
  if f == replica then
    missing = 0
  elseif string.sub(f, 1, 1) ~= ':' then
    if tonumber(fields[i + 1]) < now_ms then
      redis.call('HDEL', watch, f)
    else
      others = others + 1
    end
  end
end

if op == 'drop' then
  if others == 0 then
    redis.call('DEL', watch)
  end
  return 0
end
redis.call('HSETNX', watch, ':epoch', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])))
redis.call('HSET', watch, replica, string.format('%d', now_ms + ttl))
redis.call('PEXPIRE', watch, ttl)
return missing
