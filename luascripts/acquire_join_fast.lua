-- acquire_join_fast.lua: acquire.lua's path for a waiter joining the line behind an exclusive
-- holder (the common contended call), run before lib.lua's helpers are defined, as
-- acquire_fast.lua is (defining them costs more Redis time than this whole path). Same KEYS, ARGV
-- and reply as acquire.lua: a wait for an exclusive hold of a lock of the gateway's own layout
-- that another lease holds exclusively, with no shared holds, nobody streaming its events, and
-- neither a record of the request's Idempotency-Key nor its claim. The lease joins the queue as
-- acquire.lua's wait path joins it (an earlier arrival is kept; a ticket's arrival is taken) and
-- is answered {2, ms, arrival}: while an exclusive holder is in, nothing fits for anyone, so
-- acquire.lua promotes nobody either. Anything else falls through to acquire.lua.
if ARGV[6] == 'l' and ARGV[16] == 'x' and ARGV[11] == 'wait'
    and redis.call('HEXISTS', KEYS[1], ARGV[7]) == 0 and redis.call('EXISTS', KEYS[1]) == 1
    and redis.call('EXISTS', KEYS[6], KEYS[1] .. ':watch', KEYS[10], claim_key or KEYS[10]) == 0 then
  local q, qd, qm, lease, liveness_ms = KEYS[3], KEYS[4], KEYS[5], ARGV[7], tonumber(ARGV[3])
  local now = now_us()
  local arrival = tonumber(ARGV[13])
  if arrival == 0 then
    arrival = tonumber(redis.call('GETDEL', KEYS[9]) or gw_us or now)
  end
  redis.call('ZADD', q, 'NX', string.format('%d', arrival), lease)
  redis.call('ZADD', qd, string.format('%d', math.floor(now / 1000) + liveness_ms), lease)
  redis.call('HSET', qm, lease, cjson.encode({r = ARGV[12], o = ARGV[9], t = ARGV[8], w = ARGV[10], h = ARGV[14]}))
  for _, key in ipairs({q, qd, qm}) do
    redis.call('PEXPIRE', key, liveness_ms * 10) -- keep_queue in lib_queue.lua
  end
  claim_fresh()
  return {2, redis.call('PTTL', KEYS[1]), tonumber(redis.call('ZSCORE', q, lease))}
end
