-- acquire_fast.lua: acquire.lua's uncontended path for an exclusive hold of a lock without an
-- Idempotency-Key (the common call), run before lib.lua's helpers are defined. Same KEYS, ARGV and
-- reply as acquire.lua: nothing holds the lock (exclusively or shared) and nobody waits, so it is
-- granted at once, whatever the mode ('try' or 'wait'). Anything else falls through to acquire.lua,
-- and so does a lock someone streams the events of (its hash KEYS[1]..':watch' exists, see notify in
-- lib.lua): acquire.lua tells the watchers, and this path stays one EXISTS.
if ARGV[6] == 'l' and ARGV[16] == 'x' and ARGV[15] == '0'
    and redis.call('EXISTS', KEYS[1], KEYS[6], KEYS[3], KEYS[1] .. ':watch') == 0 then
  return {1, grant_exclusive(KEYS[1], KEYS[2], ARGV[7], ARGV[9], ARGV[8], ARGV[10], ARGV[14], ARGV[8]), 0}
end
