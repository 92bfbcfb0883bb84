-- redlock_yield.lua (+ lib.lua): RedLock mode (lockcore/redlock_quorum.go). A waiter that a
-- minority of masters granted keeps those holds while it waits for the rest, unless a master
-- granted it while an earlier waiter was in line there (the two joined the masters' queues in
-- different orders): there it gives the hold back, to that earlier waiter (promote), so that two
-- waiters never split the masters between them for good. The waiter queues again at its arrival
-- when its heartbeat finds it neither holding nor queued there.
--   KEYS as in lib.lua; ARGV[1..6] as in lib.lua, then ARGV[7..8] = [lease, arrival_us]
--   => 1: given back; 0: kept (or it held nothing here)
local lease, arrival = ARGV[7], tonumber(ARGV[8])
local fence, _, mode = held_by(lease)
if not fence then
  return 0
end
local head = first_live()
if not head or head == lease or tonumber(redis.call('ZSCORE', q, head)) >= arrival then
  return 0
end
give_back(lease, mode)
return 1
