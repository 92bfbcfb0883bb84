-- core.lua: the clock and the exclusive grant, which every granting script needs. It comes first in
-- those scripts (see scripts.go), before lib.lua, so that the fast paths (acquire_fast.lua,
-- acquire_join_fast.lua, release_fast.lua) can run and return before lib.lua's helpers are defined:
-- defining them costs Redis more than an uncontended grant itself (measured: 27 -> 17 µs of Redis
-- time per acquire+release cycle without them).

-- now_us returns the Redis time in microseconds, read once per script run and only when needed
-- (every command a script makes costs Redis CPU, and most uncontended calls need no clock).
local now_cache
local function now_us()
  if not now_cache then
    local t = redis.call('TIME')
    now_cache = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now_cache
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- ARGV[4] is the fence floor's TTL in ms. ARGV[5] is "" or, in RedLock mode (lockcore/redlock.go),
-- the calling gateway's clock in µs: the same value reaches every master, and it stands in for the
-- Redis clock where masters must agree: as the floor of a new fence (masters that saw the same
-- grants then give the same fence) and as a newcomer's place in the wait queue (every master then
-- orders waiters alike). Without it, both come from this Redis's clock.
local fence_px, gw_us = ARGV[4], tonumber(ARGV[5] or '')

-- next_fence takes the next fence of a lock whose fence floor is fencekey: max(floor + 1, now in
-- µs; RedLock: the gateway's clock), and raises the floor to it. The floor is the last fence
-- granted to any lock under it (one per Redis, or per hash slot: lockcore's deployment.fences), so
-- a lock needs no key of its own to keep its fences rising: they rise across releases, expiries
-- (which run no script) and restarts that keep the data, whatever the Redis clock does, while the
-- floor lives (ARGV[4] ms after the last grant under it); and still, after the floor expired, was
-- lost, or was rolled back by a failover, as long as the Redis clock is not behind the clock
-- that granted the fences before.
local function next_fence(fencekey)
  local fence = gw_us or now_us()
  local last = tonumber(redis.call('GET', fencekey) or '0')
  if fence <= last then
    fence = last + 1
  end
  redis.call('SET', fencekey, string.format('%d', fence), 'PX', fence_px)
  return fence
end

-- grant_exclusive makes lease the exclusive holder of the lock hash lock, with a new fence, for
-- pexpire_ms; returns the fence. A watchdog lease (wd '1') records when the watchdog stops renewing
-- it (:until, grant + hold_ms, Redis ms).
local function grant_exclusive(lock, fencekey, lease, owner, ttl, wd, hold_ms, pexpire_ms)
  local fence = next_fence(fencekey)
  local hold_until = 0
  if wd == '1' then
    hold_until = now_ms() + tonumber(hold_ms)
  end
  redis.call('HSET', lock, lease, 1, ':owner', owner, ':fence', string.format('%d', fence), ':ttl', ttl, ':wd', wd,
    ':until', string.format('%d', hold_until))
  redis.call('PEXPIRE', lock, pexpire_ms)
  return fence
end
