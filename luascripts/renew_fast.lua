-- renew_fast.lua: renew.lua's path for an exclusive hold of a lock that nobody holds shared, nobody
-- waits on and nobody streams the events of (the common renewal, and a waiter's confirmation of a
-- hand-off when nobody waits behind it), run before lib.lua's helpers are defined. Same KEYS, ARGV
-- and replies as renew.lua, which with no shared holds, no queue and no watchers renews the
-- exclusive hold alone, tells nobody, and answers {0} when the lease holds nothing. Anything else
-- falls through to renew.lua.
if ARGV[6] == 'l' and redis.call('EXISTS', KEYS[6], KEYS[3], KEYS[1] .. ':watch') == 0 then
  local v = redis.call('HMGET', KEYS[1], ARGV[7], ':ttl', ':fence', ':wd')
  local holds = tonumber(v[1])
  if not holds then
    return {0}
  end
  local ttl = ARGV[8]
  if ttl == '0' then
    ttl = v[2]
  else
    redis.call('HSET', KEYS[1], ':ttl', ttl)
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {holds, tonumber(v[3]), tonumber(ttl), tonumber(v[4]), 0, 0, 0}
end
