-- force.lua (+ lib.lua): force release (Redisson's forceUnlock): takes every hold off a lock (its
--   exclusive holder and every shared holder) or a semaphore (every permit), whoever holds it, and
--   hands what that frees to the head of the line, as a release does (see promote in lib.lua).
--   KEYS as in lib.lua; ARGV[1..6] as in lib.lua.
--   => {granted, removed, [lease, owner, fence, mode ('x'|'s'), watchdog (0|1)] for each hold removed}
--   granted is how many waiters were handed a hold. Holds that had already run out are not
--   counted: they are reclaimed as expired. The removed leases hold nothing any more, so every call
--   with their tokens (renew, release, re-entry, the watchdog's renewal) finds them gone; a waiter
--   handed the lock gets a lease of its own.
--   Each removed lease leaves a mark, the string <lock>:forced:<lease> = when (Redis ms), kept as
--   long as the fence key (ARGV[4]), so that a 410 to its token can say it was force-released
--   rather than expired or released (forced.lua reads it). A gateway that does not read marks
--   ignores them; they take no part in any grant.
--   On a name shared with Redisson (see lib_layout.lua), Redisson's holders are removed too.
local reply = {0, 0}
local holds = {}
local marked = {}

local function take(lease, owner, fence, mode, wd)
  for _, v in ipairs({lease, owner, fence, mode, tonumber(wd) or 0}) do
    reply[#reply + 1] = v
  end
  holds[#holds + 1] = {fence, mode, 0, owner}
  if not marked[lease] then -- a lease holding the lock both ways is marked once
    marked[lease] = true
    redis.call('SET', lock .. ':forced:' .. lease, string.format('%d', now_ms()), 'PX', fence_px)
  end
end

if kind == 'l' then
  local h = redis.call('HGETALL', lock)
  local holder, meta = nil, {}
  for i = 1, #h, 2 do
    if string.sub(h[i], 1, 1) == ':' then
      meta[h[i]] = h[i + 1]
    else
      holder = h[i]
    end
  end
  if holder then
    take(holder, meta[':owner'] or '', tonumber(meta[':fence']) or 0, 'x', meta[':wd'])
    redis.call('DEL', lock)
  end
  -- On a name shared with Redisson, Redisson's own holders go too, as its forceUnlock takes them
  -- (their unlock then fails and their watchdog stops): listed by their hash field, owner
  -- 'redisson', fence 0.
  for _, f in ipairs(evict_foreign()) do
    take(f[1], 'redisson', 0, f[2], 0)
  end
end

reclaim()
while true do
  local leases = redis.call('ZRANGE', sh, 0, chunk - 1)
  if #leases == 0 then
    break
  end
  local raws = redis.call('HMGET', shm, unpack(leases))
  for i, lease in ipairs(leases) do
    local raw = raws[i]
    if raw then
      local m = unpack_meta(raw)
      take(lease, m.owner, m.fence, 's', m.wd)
    else
      take(lease, '', 0, 's', 0) -- an entry Redis lost the metadata of: removed all the same
    end
  end
  redis.call('ZREM', sh, unpack(leases))
  redis.call('HDEL', shm, unpack(leases))
end

if #holds > 0 then
  notify('f', holds)
end
reply[2] = #holds
if redis.call('EXISTS', q) == 1 then
  reply[1] = promote()
end
return reply
