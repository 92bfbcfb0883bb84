-- inspect.lua (read-only): KEYS = [lock, q, qd, sh, shm, rs] (see lib.lua)  ARGV = [lease or '', layout]
--   => {waiters, size, yours, exclusive, [lease, owner, fence, holds, pttl, watchdog, hold_left_ms]
--       if exclusive is 1, redisson_count, [field, mode ('x'|'s'), holds, pttl] for each of the
--       first 100 of Redisson's own holders of a name shared with Redisson (layout 'r' or 'w', see
--       lib_layout.lua; 0 of them otherwise), shared_count, [lease, owner, fence, holds, pttl,
--       watchdog, hold_left_ms] for each of the first 100 shared holders (in expiry order)}
--   waiters = live queue entries; size = a semaphore's permits (0 for a lock, and for a semaphore
--   nobody holds or waits on); yours = 1 when the
--   given lease holds (either way); hold_left_ms is how much longer the watchdog renews a lease
--   (0 without a watchdog).
local lock, q, qd, sh, shm, rs, lease, layout = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[2]

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function left_of(wd, until_ms)
  if wd == '1' then
    return math.max(tonumber(until_ms) - now_ms, 0)
  end
  return 0
end

local reply = {redis.call('ZCOUNT', qd, now_ms, '+inf'), tonumber(redis.call('HGET', shm, ':size')) or 0, 0, 0}
local h = redis.call('HGETALL', lock)
if #h > 0 then
  local holder, holds, meta = '', 0, {}
  for i = 1, #h, 2 do
    if string.sub(h[i], 1, 1) == ':' then
      meta[h[i]] = h[i + 1]
    else
      holder, holds = h[i], tonumber(h[i + 1])
    end
  end
  reply[4] = 1
  if holder == lease then
    reply[3] = 1
  end
  for _, v in ipairs({holder, meta[':owner'], tonumber(meta[':fence']), holds, redis.call('PTTL', lock),
    tonumber(meta[':wd']), left_of(meta[':wd'], meta[':until'])}) do
    reply[#reply + 1] = v
  end
end

-- Redisson's own holders (not the gateway's, see lib_layout.lua): an RLock's holder excludes; a
-- read-write lock's field ending ':write' is its writer, the others its readers.
local theirs = {}
if (layout == 'r' or layout == 'w') and redis.call('EXISTS', rs) == 1 then
  local h = redis.call('HGETALL', rs)
  local pttl = redis.call('PTTL', rs)
  for i = 1, #h, 2 do
    local f = h[i]
    if f ~= 'mode' and string.sub(f, 1, 10) ~= 'leasegate:' and #theirs < 400 then
      local mode = 'x'
      if layout == 'w' and string.sub(f, -6) ~= ':write' then
        mode = 's'
      end
      for _, v in ipairs({f, mode, tonumber(h[i + 1]) or 0, pttl}) do
        theirs[#theirs + 1] = v
      end
    end
  end
end
reply[#reply + 1] = #theirs / 4
for _, v in ipairs(theirs) do
  reply[#reply + 1] = v
end

local shared_count = redis.call('ZCOUNT', sh, '(' .. now_ms, '+inf')
reply[#reply + 1] = shared_count
if shared_count == 0 and reply[1] == 0 then
  reply[2] = 0 -- a semaphore nobody holds or waits on has no size yet: the next acquire sets it
end
local mine = lease ~= '' and tonumber(redis.call('ZSCORE', sh, lease))
if mine and mine > now_ms then
  reply[3] = 1
end
local shared = redis.call('ZRANGEBYSCORE', sh, '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, 100)
for i = 1, #shared, 2 do
  local raw = redis.call('HGET', shm, shared[i])
  if raw then
    local holds, fence, _, wd, until_ms, owner = string.match(raw, '^(%d+) (%d+) (%d+) (%d) (%d+) (.*)$')
    for _, v in ipairs({shared[i], owner, tonumber(fence), tonumber(holds), tonumber(shared[i + 1]) - now_ms,
      tonumber(wd), left_of(wd, until_ms)}) do
      reply[#reply + 1] = v
    end
  end
end

return reply
