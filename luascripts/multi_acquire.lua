-- multi_acquire.lua (+ lib.lua): a multi-lock's try, all or nothing, in one step.
--   KEYS = lib.lua's eight keys of each member in turn (members in name order); ARGV[1..6] as in
--   lib.lua (kind 'l'), then ARGV[7..12] = [lease, ttl_ms, owner, watchdog (0|1), max_hold_ms,
--   hold ('x' exclusive | 's' shared)]
--   => {1, fence...}      every member granted to lease for ttl_ms, with a fence each (KEYS order)
--    | {0, ms, index...}  nothing granted: index (1-based) are the members held, or waited for by
--                         someone live (no barging past a line); ms is the longest time until a
--                         hold among them runs out (-2 when only waiters stand in the way)
-- Each member is checked as acquire.lua's try checks a lock, so a group and single requests for
-- its members obey one set of rules; a member that fits but has waiters is handed to its head
-- waiter, as a single try would.
local lease, ttl, owner, wd, hold_ms, want = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local n = #KEYS / 8

local busy, wait_ms = {}, -2
for i = 1, n do
  use(i)
  -- The uncontended path: nothing holds and nobody waits (one call to know it).
  if redis.call('EXISTS', lock, sh, q) > 0 or foreign(want) then
    local free = fits(want, 0)
    if free and first_live() then
      promote()
      free = false
    end
    if not free then
      busy[#busy + 1] = i
      wait_ms = math.max(wait_ms, busy_ms())
    end
  end
end
if #busy > 0 then
  return {0, wait_ms, unpack(busy)}
end

local reply = {1}
for i = 1, n do
  use(i)
  reply[i + 1] = grant(lease, want, owner, ttl, wd, hold_ms, ttl)
  notify('g', {{reply[i + 1], want, tonumber(ttl), owner}})
end
return reply
