-- idempotency_claim.lua: the request an Idempotency-Key was first sent with, so that the key sent
-- again with another request is refused instead of being taken for a retry of the first
-- (lockcore/idempotency_claims.go).
--   KEYS[1]  string  the key's claim, <prefix>idem-key:{<key>} (the key is scoped to its
--                    principal by the gateway): the fingerprint of the first request sent with it
--   ARGV = [fingerprint, ms]
--   => 1  the key's first use (claimed for ms), or the same request again
--    | 0  the key was first sent with another request: nothing changed
local prev = redis.call('GET', KEYS[1])
if not prev then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if prev == ARGV[1] then
  return 1
end
return 0
