-- forced.lua (read-only): KEYS = [mark] (<lock key>:forced:<lease>, see force.lua)  ARGV = []
--   => {1, at_ms}  the lease was force-released at at_ms (Redis time), within the fence key's TTL
--    | {0, 0}      no mark: the lease expired, was released, or was forced longer ago than that
local at = redis.call('GET', KEYS[1])
if at then
  return {1, tonumber(at)}
end
return {0, 0}
