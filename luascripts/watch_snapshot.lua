-- watch_snapshot.lua (+ inspect.lua, as the function snapshot): a replica starts watching a lock
--   (or semaphore) for live events, or checks on one it watches, and reads its state in the same
--   step, so that the events sent to it afterwards are exactly those that follow that state.
--   KEYS = [lock, q, qd, sh, shm, rs, watch] (inspect.lua's keys, then the lock's key .. ':watch',
--   see notify in lib.lua); ARGV = [lease or '', layout, replica, ttl_ms] (inspect.lua's, then
--   this script's)
--   => {epoch, seq, mine_ms, mine_owner, <inspect.lua's reply>...}: the watch hash's epoch and the
--   number of the lock's last event (:seq); mine_ms and mine_owner: the given lease's shared hold,
--   whether or not inspect lists it among its first 100 (-1 and '' when it has none); the
--   replica's entry lasts ttl_ms more, and so does the hash.
local watch, replica, ttl = KEYS[7], ARGV[3], tonumber(ARGV[4])

local t = redis.call('TIME')
redis.call('HSETNX', watch, ':epoch', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])))
redis.call('HSET', watch, replica, string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl))
if redis.call('PTTL', watch) < ttl then
  redis.call('PEXPIRE', watch, ttl)
end
local reply = snapshot()
local mine_ms, mine_owner = -1, ''
if ARGV[1] ~= '' then
  local expiry = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]))
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local raw = expiry and expiry > now and redis.call('HGET', KEYS[5], ARGV[1])
  if raw then
    mine_ms, mine_owner = expiry - now, string.match(raw, '^%d+ %d+ %d+ %d %d+ (.*)$') or ''
  end
end
table.insert(reply, 1, mine_owner)
table.insert(reply, 1, mine_ms)
table.insert(reply, 1, tonumber(redis.call('HGET', watch, ':seq') or '0'))
table.insert(reply, 1, redis.call('HGET', watch, ':epoch'))
return reply
