-- redlock_settle.lua (+ lib.lua): RedLock mode (lockcore/redlock_quorum.go). A waiter that a
-- majority of masters granted may meanwhile have been handed the lock by a master that had not
-- confirmed it (that master saw the release later): that claim becomes the lease's hold, for
-- ttl_ms, so that the lease holds there too instead of a claim running out in claim_ms. A master
-- that has not handed it over yet keeps it in line: when it does, the lease's release (which
-- reaches every master) gives that hold back, or takes the entry out of line (see release in
-- redlock_quorum.go).
--   KEYS as in lib.lua; ARGV[1..6] as in lib.lua, then ARGV[7..8] = [lease, ttl_ms]
--   => 1: the lease holds here now (TTL set); 0: it does not
local lease, ttl = ARGV[7], tonumber(ARGV[8])
local fence, _, mode = held_by(lease)
if not fence then
  return 0
end
if mode == 'x' then
  redis.call('HSET', lock, ':ttl', ttl)
  redis.call('PEXPIRE', lock, ttl)
else
  set_shared_ttl(lease, shared_hold(lease), ttl)
end
dequeue(lease)
return 1
