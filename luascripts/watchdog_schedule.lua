-- watchdog_schedule.lua: the watchdog's schedule. KEYS = [schedule]  (zset "<lock name>\n<lease>"
-- -> when its next renewal is due, ms of Redis time). Every due time is Redis time, so gateway
-- clocks play no part.
--   ARGV = ['enroll', member, delay_ms, aged_member, grant_ms]
--                                            => {1}: member is due delay_ms from now; with KEYS[2]
--                                               (the shard's aged zset, see lockcore/long_holds.go)
--                                               aged_member is entered there at grant_ms
--   ARGV = ['reschedule', member, delay_ms]  => {1}: an enrolled member is due delay_ms from now
--                                               (its lease's TTL was just set); {0}: not enrolled
--   ARGV = ['claim', hold_ms, limit]         => {later, member...}: up to limit due members, each
--                                               pushed to later (hold_ms from now), so other
--                                               replicas skip it meanwhile and a claimer that
--                                               fails is retried then
--   ARGV = ['record', later, member, due_ms, ...] => 1: a claimer's outcome: each member is due
--                                               at due_ms (0: it leaves the schedule); a member no
--                                               longer at later was rescheduled meanwhile and
--                                               keeps the earlier of the two
--   ARGV = ['follow', later, member, due_ms, ...] => 1: another RedLock master's claimer's outcome
--                                               (its copy of the schedule): each member moves on
--                                               to due_ms if that is later (0: it leaves)
local schedule, op = KEYS[1], ARGV[1]

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if op == 'enroll' then
  redis.call('ZADD', schedule, string.format('%d', now_ms + tonumber(ARGV[3])), ARGV[2])
  if KEYS[2] then
    redis.call('ZADD', KEYS[2], 'NX', ARGV[5], ARGV[4])
  end
  return {1}
end
if op == 'reschedule' then
  if not redis.call('ZSCORE', schedule, ARGV[2]) then
    return {0}
  end
  redis.call('ZADD', schedule, 'XX', string.format('%d', now_ms + tonumber(ARGV[3])), ARGV[2])
  return {1}
end
if op == 'follow' then
  for i = 3, #ARGV, 2 do
    if ARGV[i + 1] == '0' then
      redis.call('ZREM', schedule, ARGV[i])
    else
      redis.call('ZADD', schedule, 'XX', 'GT', ARGV[i + 1], ARGV[i])
    end
  end
  return 1
end
if op == 'record' then
  local later = ARGV[2]
  for i = 3, #ARGV, 2 do
    local member, due = ARGV[i], ARGV[i + 1]
    local score = redis.call('ZSCORE', schedule, member)
    if due == '0' then
      redis.call('ZREM', schedule, member)
    elseif score == later then
      redis.call('ZADD', schedule, 'XX', due, member)
    elseif score then
      redis.call('ZADD', schedule, 'XX', 'LT', due, member)
    end
  end
  return 1
end
local due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[3]))
local later = string.format('%d', now_ms + tonumber(ARGV[2]))
if #due > 0 then
  local args = {'XX'}
  for i = 1, #due do
    args[#args + 1] = later
    args[#args + 1] = due[i]
  end
  redis.call('ZADD', schedule, unpack(args))
end
table.insert(due, 1, later)
return due
