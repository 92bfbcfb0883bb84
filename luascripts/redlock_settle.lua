-- redlock_settle.lua (+ lib.lua): RedLock mode (lockcore/redlock_quorum.go). A waiter that a
-- majority of masters granted may meanwhile have been handed the lock by a master that had not
-- confirmed it (that master saw the release later): that claim becomes the lease's hold, for
-- ttl_ms, so that the lease holds there too instead of a claim running out in claim_ms. A master
-- that has not handed it over yet keeps it in line: when it does, the lease's release (which
-- reaches every master) gives that hold back, or takes the entry out of line (see release in
-- redlock_quorum.go).
-- The hold carries the fence the lease was granted with (the majority's), not the one this
-- master's hand-off drew: the lease's client knows that one, and a lock's inspection shows it.
-- The fence floor is raised to it if lower, as redlock_fence.lua does.
--   KEYS as in lib.lua; ARGV[1..6] as in lib.lua, then ARGV[7..9] = [lease, ttl_ms, fence]
--   => 1: the lease holds here now (TTL and fence set); 0: it does not
local lease, ttl, granted = ARGV[7], tonumber(ARGV[8]), ARGV[9]
local fence, _, mode = held_by(lease)
if not fence then
  return 0
end
if tonumber(redis.call('GET', fencekey) or '0') < tonumber(granted) then
  redis.call('SET', fencekey, granted, 'PX', ARGV[4])
end
if mode == 'x' then
  redis.call('HSET', lock, ':ttl', ttl, ':fence', granted)
  redis.call('PEXPIRE', lock, ttl)
else
  local m = shared_hold(lease)
  m.fence = tonumber(granted)
  set_shared_ttl(lease, m, ttl)
end
dequeue(lease)
return 1
