-- lib_notify.lua (part of lib.lua): live events: who watches a lock, and the messages they get.

-- Live events (lockcore/events.go). A lock is watched while some gateway replica streams its
-- events: that replica keeps the hash <lock key>:watch, replica -> until when it watches (ms, Redis
-- time), plus :seq (the number of the lock's last event) and :epoch (set when the hash is made, so
-- that a stream notices a hash made anew). Scripts derive the hash's name from the lock's key
-- rather than taking it as a KEY: it shares the lock's hash tag, so it lives in the lock's Cluster
-- slot, and a KEY would widen every script's contract and every caller (and the uncontended fast
-- paths, see core.lua) for a key that is absent unless someone watches. Unwatched, an event costs
-- one EXISTS and publishes nothing.
local function watched()
  return redis.call('EXISTS', lock .. ':watch') == 1
end

-- notify sends event typ about holds to every replica watching the lock, on its grants channel
-- (see publish): typ is 'g' (granted), 'h' (handed to a waiter), 'r' (released), 'e' (expired),
-- 'f' (forced), 'w' (the waiters changed) or 't' (the holds' TTLs were set anew: a renewal, a
-- re-entry, a confirmed hand-off; streams only move their expiry estimates, see lockcore/events.go);
-- each hold is {fence, mode ('x'|'s'), ttl_ms, owner}.
-- The message is "v <lock key> <epoch> <seq> <typ> <live waiters> <now_ms>", then a line
-- "<fence> <mode> <ttl_ms> <owner>" per hold (owners are printable: no newline). Entries of
-- replicas that stopped watching are dropped on the way.
local function notify(typ, holds)
  local watch = lock .. ':watch'
  if redis.call('EXISTS', watch) == 0 then
    return
  end
  local now = now_ms()
  local fields = redis.call('HGETALL', watch)
  local epoch, replicas = '0', {}
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f == ':epoch' then
      epoch = fields[i + 1]
    elseif string.sub(f, 1, 1) ~= ':' then
      if tonumber(fields[i + 1]) >= now then
        replicas[#replicas + 1] = f
      else
        redis.call('HDEL', watch, f)
      end
    end
  end
  local seq = redis.call('HINCRBY', watch, ':seq', 1)
  local lines = {string.format('v %s %s %d %s %d %d', lock, epoch, seq, typ, redis.call('ZCOUNT', qd, now, '+inf'), now)}
  for _, h in ipairs(holds or {}) do
    lines[#lines + 1] = string.format('%d %s %d ', h[1] or 0, h[2], h[3]) .. (h[4] or '')
  end
  local msg = table.concat(lines, '\n')
  for _, r in ipairs(replicas) do
    publish(r, msg)
  end
end
