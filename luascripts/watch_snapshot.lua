-- watch_snapshot.lua (+ inspect.lua, as the function snapshot): a replica starts watching a lock
--   (or semaphore) for live events, or checks on one it watches, and reads its state in the same
--   step, so that the events sent to it afterwards are exactly those that follow that state.
--   KEYS = [lock, q, qd, sh, shm, watch] (inspect.lua's keys, then the lock's key .. ':watch', see
--   notify in lib.lua); ARGV = [lease or '', replica, ttl_ms]
--   => {epoch, seq, <inspect.lua's reply>...}: the watch hash's epoch and the number of the lock's
--   last event (:seq); the replica's entry lasts ttl_ms more, and so does the hash.
local watch, replica, ttl = KEYS[6], ARGV[2], tonumber(ARGV[3])

local t = redis.call('TIME')
redis.call('HSETNX', watch, ':epoch', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])))
redis.call('HSET', watch, replica, string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl))
if redis.call('PTTL', watch) < ttl then
  redis.call('PEXPIRE', watch, ttl)
end
local reply = snapshot()
table.insert(reply, 1, tonumber(redis.call('HGET', watch, ':seq') or '0'))
table.insert(reply, 1, redis.call('HGET', watch, ':epoch'))
return reply
