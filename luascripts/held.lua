-- held.lua: one principal's ledger of held leases, for the cap on what a principal holds at once
-- across every replica (lockcore/held_quota.go).
--
-- KEYS[1]  zset  counted hold -> until when it counts (ms, Redis time). A counted hold is
--          "<kind> <name> <lease>": a lock or semaphore permit a lease of the principal holds, or
--          may be granted any moment (a request parked in the lock's queue). Holds stop counting
--          when released, or at the latest moment they can lapse, so the ledger heals itself after
--          expiries, crashes and lost replies; it expires with its last counted hold.
-- ARGV = [op, ms, max, member...]
--   'reserve'  counts the members for ms from now, if they fit under max beside the holds still
--              counted (a member counted already is not counted twice; it counts until the later
--              of its two ends). Reply {1}, or {0, ms until the first counted hold lapses}.
--   'extend'   members still counted count for ms from now at least. Reply {1}.
--   'free'     the members count no more. Reply {1}.
local key, op, span, cap = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local members = {}
for i = 4, #ARGV do
  members[#members + 1] = ARGV[i]
end

if op == 'free' then
  redis.call('ZREM', key, unpack(members))
  return {1}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now + span

-- live makes the ledger outlive its latest counted hold.
local function live()
  if redis.call('PTTL', key) < span then
    redis.call('PEXPIRE', key, span)
  end
end

if op == 'extend' then
  for _, m in ipairs(members) do
    redis.call('ZADD', key, 'XX', 'GT', until_ms, m)
  end
  live()
  return {1}
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local new = 0
for _, m in ipairs(members) do
  if not redis.call('ZSCORE', key, m) then
    new = new + 1
  end
end
if new > 0 and redis.call('ZCARD', key) + new > cap then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2] or now) - now, 0)}
end
for _, m in ipairs(members) do
  redis.call('ZADD', key, 'GT', until_ms, m)
end
live()
return {1}
