-- waiting.lua (read-only): KEYS = [q, qd, qm] (see lib.lua)  ARGV = [limit]
--   => {now_us, [lease, owner, mode, arrival_us] for each of the first `limit` live waiters, in
--   line order}
--   now_us is the Redis time. A live waiter is one whose liveness deadline (qd) has not passed,
--   as inspect.lua counts them; mode is qm's m ('x' or 's'; absent: 'x'). The walk reads the first
--   100 entries of the line at most (the granting scripts prune dead ones), so a line whose head
--   holds many dead entries may answer fewer than limit.
local q, qd, qm, limit = KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1])

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)

local reply = {now_us}
local line = redis.call('ZRANGE', q, 0, 99, 'WITHSCORES')
local found = 0
for i = 1, #line, 2 do
  if found >= limit then
    break
  end
  local lease = line[i]
  local deadline = tonumber(redis.call('ZSCORE', qd, lease))
  local raw = deadline and deadline >= now_ms and redis.call('HGET', qm, lease)
  if raw then
    local m = cjson.decode(raw)
    for _, v in ipairs({lease, m.o or '', m.m or 'x', tonumber(line[i + 1])}) do
      reply[#reply + 1] = v
    end
    found = found + 1
  end
end
return reply
