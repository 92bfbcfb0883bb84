-- keepalive.lua (+ lib.lua): one replica's beat over many queues at once: it keeps its waiters in
-- line on every lock (or semaphore) of one slot it has waiters for, at a few commands per lock,
-- and names the locks that need the full care of heartbeat.lua.
--   KEYS: the eight keys of each lock in turn (as in multi_acquire.lua), all in one hash slot on
--   Redis Cluster; ARGV[1..6] as in lib.lua (its kind is the first lock's), then for each lock
--   [kind, n, lease 1, ..., lease n]: its kind and that replica's n waiting leases.
--   For each lock it pushes the given leases' liveness deadlines forward (as heartbeat.lua does),
--   and the queue keys' expiry once two liveness windows of it passed (three PEXPIREs per lock
--   every Heartbeat took a fifth of redis-server's time in this script: 36-37 % of a core against
--   29-30 % with 10,000 locks), and nothing else: it grants nothing, prunes nothing, publishes
--   nothing.
--   => {index...} the locks (1-based, in KEYS order) that need heartbeat.lua now: some given lease
--   is not queued (it was handed a hold whose message may have been lost, or Redis lost its entry),
--   or the lock's earliest hold has run out or nothing holds it (an expiry publishes nothing; the
--   hint that tells of it may have been lost).
local at = 7
local deadline = string.format('%d', now_ms() + liveness_ms)
local reply = {}
for i = 1, #KEYS / 8 do
  use(i)
  of_kind(ARGV[at])
  local first, last = at + 2, at + 1 + tonumber(ARGV[at + 1])
  at = last + 1
  local kept = 0
  local left = redis.call('PTTL', q)
  if left ~= -2 then
    for from = first, last, chunk do
      local args = {'XX', 'GT', 'CH'}
      for j = from, math.min(from + chunk - 1, last) do
        args[#args + 1] = deadline
        args[#args + 1] = ARGV[j]
      end
      kept = kept + redis.call('ZADD', qd, unpack(args))
    end
    if left < queue_ttl_ms - 2 * liveness_ms then
      keep_queue()
    end
  end
  if kept < last - first + 1 or busy_ms() <= 0 then
    reply[#reply + 1] = i
  end
end
return reply
