-- release_fast.lua: release.lua's path for a lock nobody waits on and nobody holds shared, without
-- an Idempotency-Key (the common call), run before lib.lua's helpers are defined. Same KEYS, ARGV
-- and replies as release.lua; with no queue and no shared holds there is nobody to hand to, and
-- the lease's exclusive hold is its only one. Anything else falls through to release.lua, and so
-- does a lock someone streams the events of (its hash KEYS[1]..':watch', see notify in lib.lua).
if ARGV[6] == 'l' and ARGV[8] == '0' and ARGV[9] ~= 's'
    and redis.call('EXISTS', KEYS[3], KEYS[6], KEYS[1] .. ':watch') == 0 then
  local v = redis.call('HMGET', KEYS[1], ARGV[7], ':wd')
  local holds = tonumber(v[1])
  if holds == 1 then
    redis.call('DEL', KEYS[1])
    return {0, tonumber(v[2]), 0}
  end
  if holds then
    return {redis.call('HINCRBY', KEYS[1], ARGV[7], -1), 0}
  end
  return {-1}
end
