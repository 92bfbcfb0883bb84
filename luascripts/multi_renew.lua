-- multi_renew.lua (+ lib.lua): renews every member of a multi-lock's lease, or ends the group.
--   KEYS as in multi_acquire.lua (all of the group's members, or the first ones a waiting group
--   holds so far); ARGV[1..6] as in lib.lua, then ARGV[7..12] = [lease, hold ('x'|'s'),
--   ttl_ms (0 = keep the group's), by_watchdog (1: the watchdog's renewal),
--   confirm ('' | '0' | '1': a waiting group's final step, setting every member's watchdog flag
--   to it and its max hold to max_hold_ms from now), max_hold_ms]
--   => {1, ttl_ms, watchdog, now_ms, fence...}  every member held: each one's TTL set to ttl_ms
--                                  (fences in KEYS order; now_ms: Redis time)
--    | {0, index...}               index (1-based) are the members lease no longer holds (ran out,
--                                  or lost); every member it still held has been given back, so a
--                                  group never keeps a subset
--    | {-1}                        by_watchdog, and the group is no watchdog lease or is past its
--                                  max hold: nothing changed (its members run out their last TTL)
-- Never resurrects a member. Also confirms the members a waiting group took one by one.
local lease, want, ttl, by_watchdog, confirm = ARGV[7], ARGV[8], tonumber(ARGV[9]), ARGV[10], ARGV[11]
local n = #KEYS / 8

local fences, lost = {}, {}
for i = 1, n do
  use(i)
  local fence = held_by(lease, want)
  if fence then
    fences[i] = fence
  else
    lost[#lost + 1] = i
  end
end
if #lost > 0 then
  for i = 1, n do
    if fences[i] then
      use(i)
      give_back(lease, want)
    end
  end
  return {0, unpack(lost)}
end

-- Every member carries the group's TTL and watchdog settings; read them from the first.
use(1)
local group_ttl, wd, until_ms
if want == 'x' then
  local v = redis.call('HMGET', lock, ':ttl', ':wd', ':until')
  group_ttl, wd, until_ms = tonumber(v[1]), v[2], tonumber(v[3])
else
  local m = shared_hold(lease)
  group_ttl, wd, until_ms = m.ttl, m.wd, m.until_ms
end
if by_watchdog == '1' and (wd ~= '1' or now_ms() >= until_ms) then
  return {-1}
end
if ttl == 0 then
  ttl = group_ttl
end
if confirm ~= '' then
  wd, until_ms = confirm, 0
  if wd == '1' then
    until_ms = now_ms() + tonumber(ARGV[12])
  end
end

for i = 1, n do
  use(i)
  if want == 'x' then
    if confirm ~= '' then
      redis.call('HSET', lock, ':ttl', ttl, ':wd', wd, ':until', string.format('%d', until_ms))
    else
      redis.call('HSET', lock, ':ttl', ttl)
    end
    redis.call('PEXPIRE', lock, ttl)
  else
    local m = shared_hold(lease)
    if confirm ~= '' then
      m.wd, m.until_ms = wd, until_ms
    end
    set_shared_ttl(lease, m, ttl)
  end
  if redis.call('EXISTS', q) == 1 then
    hint()
  end
end
return {1, ttl, tonumber(wd), now_ms(), unpack(fences)}
