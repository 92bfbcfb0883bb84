-- claim.lua: an Idempotency-Key's claim (lockcore's idempotency_claims.go), taken before anything else
-- changes in the scripts a request with a key runs (acquire, reenter, release, election,
-- election_resign) when its key may go in one script with the lock's: on one Redis, always
-- (lockcore's idempotency_claims.go). Such a call ends with KEYS[#KEYS] = the claim's key and
-- ARGV[#ARGV-2..#ARGV] = ['\0claim', fingerprint, ms]; any other call passes through untouched.
-- The fast paths (acquire_fast.lua, acquire_join_fast.lua, release_fast.lua) come first and take a claim whose
-- key does not exist yet themselves (claim_fresh: one SET, no GET); the claim then runs on the
-- other paths. A key first sent with another request ends the script with an error reply that
-- starts with IDEMPOTENCY_KEY_REUSED, before anything changed; the key's first use claims it for ms.
local claim_key, claim_fp, claim_ms
if #ARGV >= 3 and ARGV[#ARGV - 2] == '\0claim' then
  claim_key, claim_fp, claim_ms = KEYS[#KEYS], ARGV[#ARGV - 1], ARGV[#ARGV]
end

-- claim_fresh claims the request's key, which the caller saw does not exist (nil: no claim).
local function claim_fresh()
  if claim_key then
    redis.call('SET', claim_key, claim_fp, 'PX', claim_ms)
  end
end

-- claim_checked claims the request's key or, when it was first sent with another request, returns
-- the error reply to end the script with.
local function claim_checked()
  if not claim_key then
    return nil
  end
  local prev = redis.call('GET', claim_key)
  if not prev then
    redis.call('SET', claim_key, claim_fp, 'PX', claim_ms)
  elseif prev ~= claim_fp then
    return redis.error_reply('IDEMPOTENCY_KEY_REUSED the key was first sent with another request')
  end
  return nil
end
