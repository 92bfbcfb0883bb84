-- acquire_fast.lua: acquire.lua's uncontended path for an exclusive hold of a lock (the common
-- call), run before lib.lua's helpers are defined. Same KEYS, ARGV and reply as acquire.lua:
-- nothing holds the lock (exclusively or shared), nobody waits, and neither a record of the
-- request's Idempotency-Key (KEYS[10]: without a key, a key never written) nor its claim (see
-- claim.lua) is there, so it is granted at once, whatever the mode ('try' or 'wait'), and the
-- key's record is written as acquire.lua's granted does, and its claim. Anything else falls through to acquire.lua (a retry's replay among it), and so does a lock
-- someone streams the events of (its hash KEYS[1]..':watch' exists, see notify in lib.lua):
-- acquire.lua tells the watchers, and this path stays one EXISTS.
if ARGV[6] == 'l' and ARGV[16] == 'x'
    and redis.call('EXISTS', KEYS[1], KEYS[6], KEYS[3], KEYS[1] .. ':watch', KEYS[10], claim_key or KEYS[10]) == 0 then
  local fence = grant_exclusive(KEYS[1], KEYS[2], ARGV[7], ARGV[9], ARGV[8], ARGV[10], ARGV[14], ARGV[8])
  if ARGV[15] ~= '0' then
    redis.call('SET', KEYS[10], ARGV[7] .. ' ' .. ARGV[9], 'PX', math.max(tonumber(ARGV[15]), tonumber(ARGV[8])))
  end
  claim_fresh()
  return {1, fence, 0}
end
