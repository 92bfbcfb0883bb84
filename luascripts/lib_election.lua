-- lib_election.lua: what election.lua and election_resign.lua share: an election's announcements.
--
-- An election N is a lock of a kind of its own (lockcore.KindElection, keys under P{N}:elect, the
-- hash tag {N}): campaigning is acquiring it, the leader is its exclusive holder. Beside the lock's
-- keys an election has two more, under the same hash tag:
--   leader  hash    the leader the log last announced: lease, fence, owner, value, since (Redis ms
--                   of its election), eid (its `elected` entry's id), vid (the id of the entry
--                   that set its value); and n, the number of the log's last entry. Without a
--                   leader only n is left.
--   log     stream  the announcements, in order, each with fields e (elected | proclaimed |
--                   resigned | vacant), n (its number: 1, 2, ...), fence, owner, value (elected
--                   and proclaimed only) and at (Redis ms); the last maxlen are kept (XADD MAXLEN).
-- Both expire retention_ms after the last announcement or check (see el_keep).
--
-- The lock's hash is read through its documented fields only: the field <lease> is present while
-- that lease holds the lock, and :fence is its fence.
--
-- Set el_lock, el_leader, el_log, el_maxlen and el_retention before calling these.
local el_lock, el_leader, el_log, el_maxlen, el_retention

local el_time
local function el_now()
  if not el_time then
    local t = redis.call('TIME')
    el_time = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return el_time
end

-- el_holds tells whether lease, granted with fence, holds the election's lock now.
local function el_holds(lease, fence)
  return redis.call('HEXISTS', el_lock, lease) == 1 and tonumber(redis.call('HGET', el_lock, ':fence')) == tonumber(fence)
end

-- el_appended lists the types of the entries this script appended, in order.
local el_appended = {}

-- el_append adds an entry to the log and returns its id.
local function el_append(typ, fence, owner, value)
  el_appended[#el_appended + 1] = typ
  local n = redis.call('HINCRBY', el_leader, 'n', 1)
  local args = {'XADD', el_log, 'MAXLEN', el_maxlen, '*', 'e', typ, 'n', n, 'fence', fence, 'owner', owner}
  if value then
    args[#args + 1] = 'value'
    args[#args + 1] = value
  end
  args[#args + 1] = 'at'
  args[#args + 1] = el_now()
  return redis.call(unpack(args))
end

-- el_keep makes the leader hash and the log last retention_ms more.
local function el_keep()
  redis.call('PEXPIRE', el_leader, el_retention)
  redis.call('PEXPIRE', el_log, el_retention)
end

local el_fields = {'lease', 'fence', 'owner', 'value', 'since', 'eid', 'vid'}

-- el_leader_now returns the announced leader ({lease, fence, owner, value, since, eid, vid}) if
-- its lease still holds the lock, after announcing the end of one that no longer does (a lapse: it
-- ran out, was force-released, or was released without resigning) with a `vacant` entry.
local function el_leader_now()
  local v = redis.call('HMGET', el_leader, unpack(el_fields))
  if not v[1] then
    return nil
  end
  local cur = {}
  for i, f in ipairs(el_fields) do
    cur[f] = v[i]
  end
  if el_holds(cur.lease, cur.fence) then
    return cur
  end
  el_append('vacant', cur.fence, cur.owner)
  redis.call('HDEL', el_leader, unpack(el_fields))
  el_keep()
  return nil
end

-- el_resign announces the resignation of cur, the announced leader, and returns its entry's id.
local function el_resign(cur)
  local id = el_append('resigned', cur.fence, cur.owner)
  redis.call('HDEL', el_leader, unpack(el_fields))
  el_keep()
  return id
end
