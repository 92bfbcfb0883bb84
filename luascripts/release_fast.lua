-- release_fast.lua: release.lua's path for a lock nobody waits on and nobody holds shared (the
-- common call), run before lib.lua's helpers are defined. Same KEYS, ARGV and replies as
-- release.lua; with no queue and no shared holds there is nobody to hand to, and the lease's
-- exclusive hold is its only one. A request with an Idempotency-Key whose record (KEYS[9]: without
-- a key, a key never written) and claim (see claim.lua) are not there takes it too: its reply is
-- remembered as release.lua's remember does, and its key claimed. Anything else falls through to release.lua (a retry's replay among
-- it), and so does a lock someone streams the events of (its hash KEYS[1]..':watch', see notify in
-- lib.lua).
if ARGV[6] == 'l' and ARGV[9] ~= 's'
    and redis.call('EXISTS', KEYS[3], KEYS[6], KEYS[1] .. ':watch', KEYS[9], claim_key or KEYS[9]) == 0 then
  local v = redis.call('HMGET', KEYS[1], ARGV[7], ':wd', ':ttl')
  local holds, reply = tonumber(v[1]), nil
  if holds == 1 then
    redis.call('DEL', KEYS[1])
    reply = {0, tonumber(v[2]), 0}
  elseif holds then
    reply = {redis.call('HINCRBY', KEYS[1], ARGV[7], -1), 0}
  else
    claim_fresh()
    return {-1}
  end
  if ARGV[8] ~= '0' then
    local parts = {}
    for i = 1, #reply do
      parts[i] = string.format('%d', reply[i])
    end
    redis.call('SET', KEYS[9], table.concat(parts, ' '), 'PX', math.max(tonumber(ARGV[8]), tonumber(v[3]) or 0))
  end
  claim_fresh()
  return reply
end
