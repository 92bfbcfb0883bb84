-- lib_idempotency.lua (part of lib.lua): the idempotency records that answer a retry as the first call was answered.

-- replay returns the integer reply remembered under record (nil if none), for a retried request;
-- idem_ms is 0 when the request carries no Idempotency-Key.
local function replay(record, idem_ms)
  if idem_ms == 0 then
    return nil
  end
  local prev = redis.call('GET', record)
  if not prev then
    return nil
  end
  local reply = {}
  for n in string.gmatch(prev, '%S+') do
    reply[#reply + 1] = tonumber(n)
  end
  return reply
end

-- remember keeps the integer reply under record for max(idem_ms, ttl_ms) and returns it. (Numbers
-- are written with %d: cjson would round fences, which exceed its 14 significant digits.)
local function remember(record, idem_ms, ttl_ms, reply)
  if idem_ms > 0 then
    local parts = {}
    for i = 1, #reply do
      parts[i] = string.format('%d', reply[i])
    end
    redis.call('SET', record, table.concat(parts, ' '), 'PX', math.max(idem_ms, tonumber(ttl_ms) or 0))
  end
  return reply
end
