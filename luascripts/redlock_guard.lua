-- redlock_guard.lua: RedLock mode (lockcore/redlock.go) records which Redis process a master is and
-- starts its restart guard when that changed.
--   KEYS = [run_id key, guard key]  ARGV = [run_id (INFO server), guard_ms, fresh (1: a new
--   deployment, whose masters are all empty: no guard)]
--   => ms the guard has left (<= 0: none). A master whose recorded run_id is another process's, or
--   missing (it lost its data), restarted since a gateway last looked: it is not counted toward
--   any quorum until the guard key runs out, on this master's clock, for every gateway alike.
local recorded = redis.call('GET', KEYS[1])
if recorded ~= ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
  if recorded or ARGV[3] ~= '1' then
    redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  end
end
return redis.call('PTTL', KEYS[2])
