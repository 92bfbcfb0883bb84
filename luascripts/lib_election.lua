-- lib_election.lua: what election.lua and election_resign.lua share: an election's announcements.
--
-- An election N is a lock of a kind of its own (lockcore.KindElection, keys under P{N}:elect, the
-- hash tag {N}): campaigning is acquiring it, the leader is its exclusive holder. Beside the lock's
-- keys an election has two more, under the same hash tag:
--   leader  hash    the leader the log last announced: lease, fence, owner, value, since (Redis ms
--                   of its election), eid (its `elected` entry's id), vid (the id of the entry
--                   that set its value); n, the number of the log's last entry, and bytes, the
--                   size of the log's entries (see el_size). Without a leader n and bytes are left.
--   log     stream  the announcements, in order, each with fields e (elected | proclaimed |
--                   resigned | vacant), n (its number: 1, 2, ...), fence, owner, value (elected
--                   and proclaimed only) and at (Redis ms); the last entries are kept, at most
--                   maxlen of them and at most maxbytes bytes, but always the last (see el_trim).
-- Both expire retention_ms after the last announcement or check (see el_keep).
--
-- The lock's hash is read through its documented fields only: the field <lease> is present while
-- that lease holds the lock, and :fence is its fence.
--
-- Set el_lock, el_leader, el_log, el_maxlen, el_maxbytes and el_retention before calling these.
local el_lock, el_leader, el_log, el_maxlen, el_maxbytes, el_retention

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

-- el_str writes a number in full (tostring would write a fence of 16 digits as 1.7e+15).
local function el_str(v)
  if type(v) == 'number' then
    return string.format('%d', v)
  end
  return v
end

-- el_size is the size a log entry counts for against maxbytes: the bytes of its fields' names
-- and values, fields = {name, value, name, value, ...}, and 16 for the entry itself.
local function el_size(fields)
  local n = 16
  for _, f in ipairs(fields) do
    n = n + #f
  end
  return n
end

-- el_trim drops the log's oldest entries while it keeps more than maxlen of them or more than
-- maxbytes bytes, never the last; bytes is the size of its entries, stored back in the leader
-- hash. Each entry is dropped once, so appending costs O(1) steps on average.
local function el_trim(bytes)
  local len = redis.call('XLEN', el_log)
  while len > 1 and (len > tonumber(el_maxlen) or bytes > tonumber(el_maxbytes)) do
    local oldest = redis.call('XRANGE', el_log, '-', '+', 'COUNT', 1)[1]
    redis.call('XDEL', el_log, oldest[1])
    bytes, len = bytes - el_size(oldest[2]), len - 1
  end
  redis.call('HSET', el_leader, 'bytes', math.max(bytes, 0))
end

-- el_append adds an entry to the log and returns its id.
local function el_append(typ, fence, owner, value)
  el_appended[#el_appended + 1] = typ
  local n = redis.call('HINCRBY', el_leader, 'n', 1)
  local fields = {'e', typ, 'n', el_str(n), 'fence', el_str(fence), 'owner', owner}
  if value then
    fields[#fields + 1] = 'value'
    fields[#fields + 1] = value
  end
  fields[#fields + 1] = 'at'
  fields[#fields + 1] = el_str(el_now())
  local id = redis.call('XADD', el_log, '*', unpack(fields))
  -- A log Redis lost (a failover) while the leader hash stayed counts from nothing again.
  local bytes = redis.call('XLEN', el_log) > 1 and tonumber(redis.call('HGET', el_leader, 'bytes') or 0) or 0
  el_trim(bytes + el_size(fields))
  return id
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
