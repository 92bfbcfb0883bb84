-- multi_release.lua (+ lib.lua): gives back every member a multi-lock's lease still holds.
--   KEYS as in multi_acquire.lua; ARGV[1..6] as in lib.lua, then ARGV[7..8] = [lease, hold ('x'|'s')]
--   => {watchdog, index...}  every member lease held is given back, each to the head of its own
--                            line (see give_back in lib.lua); index (1-based) are the members it
--                            no longer held; watchdog is 1 when the group had a watchdog duty,
--                            which the caller drops
local lease, want = ARGV[7], ARGV[8]
local n = #KEYS / 8

local reply = {0}
for i = 1, n do
  use(i)
  local wd = give_back(lease, want)
  if not wd then
    reply[#reply + 1] = i
  elseif wd == '1' then
    reply[1] = 1
  end
end
return reply
