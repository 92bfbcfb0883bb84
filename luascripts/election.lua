-- election.lua (+ lib_election.lua): announces an election's leader and its value, or reads them.
--   KEYS = [lock, qd, leader, log, idempotency record] (the election's lock and live-waiter keys,
--   see lib.lua; its leader hash and log, see lib_election.lua; the record of a proclaim's
--   Idempotency-Key)
--   ARGV = [op, lease, fence, owner, value, maxlen, retention_ms, idem_ms, maxbytes]
--   op 'elect': lease, granted the lock with fence, is announced leader with value (an `elected`
--      entry), after the end of the leader announced before it (`vacant`: its lease no longer
--      holds, since this one does). A lease already announced is not announced again (a retry).
--   op 'proclaim': the announced leader lease sets its value (a `proclaimed` entry; none when the
--      value is the same). A lease that holds the lock but was never announced (Redis lost the
--      leader hash) is announced now (`elected`). With an Idempotency-Key (idem_ms > 0) a retry
--      changes nothing more, even after a later proclaim.
--   op 'check': announces the end of a leader whose lease no longer holds (`vacant`); lease,
--      fence, owner and value are ''.
--   => {ok, last_id, last_n, lease, fence, owner, value, since_ms, eid, vid, pttl_ms, candidates,
--       appended}
--   ok is 0 when lease does not hold the lock with fence (elect, proclaim): nothing changed. The
--   rest is the election after the op: the log's last entry (id, n; '0-0' and 0 when empty), the
--   announced leader ('' and 0s when none; pttl_ms: its lease's remaining TTL) and the live
--   waiters in the lock's line (the candidates); appended lists the types of the entries this call
--   added, space-separated ('' for none). Every op makes the leader hash and the log last
--   retention_ms more while they exist.
local op, lease, fence, owner, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local idem_ms, record = tonumber(ARGV[8]), KEYS[5]
el_lock, el_leader, el_log, el_maxlen, el_maxbytes, el_retention = KEYS[1], KEYS[3], KEYS[4], ARGV[6], ARGV[9], ARGV[7]

local function state(ok, cur)
  local last, last_n = '0-0', 0
  local tail = redis.call('XREVRANGE', el_log, '+', '-', 'COUNT', 1)[1]
  if tail then
    last = tail[1]
    for i = 1, #tail[2], 2 do
      if tail[2][i] == 'n' then
        last_n = tonumber(tail[2][i + 1])
      end
    end
  end
  local candidates = redis.call('ZCOUNT', KEYS[2], el_now(), '+inf')
  if not cur then
    return {ok, last, last_n, '', 0, '', '', 0, '', '', -1, candidates, table.concat(el_appended, ' ')}
  end
  return {ok, last, last_n, cur.lease, tonumber(cur.fence), cur.owner, cur.value, tonumber(cur.since), cur.eid, cur.vid,
    redis.call('PTTL', el_lock), candidates, table.concat(el_appended, ' ')}
end

if op == 'proclaim' and idem_ms > 0 and redis.call('EXISTS', record) == 1 then
  return state(1, el_leader_now())
end
if op ~= 'check' and not el_holds(lease, fence) then
  return state(0, el_leader_now())
end
local cur = el_leader_now()
if op == 'check' then
  if cur then
    el_keep()
  end
  return state(1, cur)
end

if cur and cur.lease == lease then -- announced already: a retried elect, or a proclaim
  if op == 'proclaim' and cur.value ~= value then
    cur.vid, cur.value = el_append('proclaimed', fence, cur.owner, value), value
    redis.call('HSET', el_leader, 'value', value, 'vid', cur.vid)
  end
else -- cur is nil: the leader announced before (if any) no longer holds, since lease does
  local id = el_append('elected', fence, owner, value)
  cur = {lease = lease, fence = fence, owner = owner, value = value, since = el_now(), eid = id, vid = id}
  redis.call('HSET', el_leader, 'lease', lease, 'fence', fence, 'owner', owner, 'value', value, 'since', cur.since,
    'eid', id, 'vid', id)
end
if op == 'proclaim' and idem_ms > 0 then
  redis.call('SET', record, '1', 'PX', idem_ms)
end
el_keep()
return state(1, cur)
