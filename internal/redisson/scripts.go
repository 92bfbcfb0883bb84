package redisson

import "github.com/redis/rueidis"

// Java Redisson's Lua scripts, verbatim: each constant is the concatenation of the Java string
// literals in redisson/redisson at commit 66863978b4a92093b97c1f8c96f182a77e81d50e (4.7.0-62,
// 2026-08-21), file redisson/src/main/java/org/redisson/<file> named on each, piece by piece, so
// the script's SHA1 is the one Java Redisson loads (TestScriptsVerbatim pins them). Do not
// reformat: a changed byte is a different script to Redis's script cache.
//
// Replies: a Lua nil reaches Go as rueidis.IsRedisNil; see lock.go and rwlock.go for their decoders.
// "publish command" is PUBLISH or SPUBLISH (Client.publishCommand); "latch ms" is how long an
// unlock's result stays under its unlock latch key (unlockLatchTimeout).

// lockTryLockLua is RedissonLock.java tryLockInnerAsync.
// KEYS = [name]  ARGV = [lease ms, field]  => nil (taken or re-entered) | pttl of the holder.
const lockTryLockLua = "if ((redis.call('exists', KEYS[1]) == 0) " +
	"or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
	"redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
	"redis.call('pexpire', KEYS[1], ARGV[1]); " +
	"return nil; " +
	"end; " +
	"return redis.call('pttl', KEYS[1]);"

// lockUnlockLua is RedissonLock.java unlockInnerAsync.
// KEYS = [name, channel, unlock latch]  ARGV = [0, lease ms, field, publish command, latch ms]  => nil (not held) | 0 (still held) | 1 (released, 0 published).
const lockUnlockLua = "local val = redis.call('get', KEYS[3]); " +
	"if val ~= false then " +
	"return tonumber(val);" +
	"end; " +
	"if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " +
	"return nil;" +
	"end; " +
	"local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
	"if (counter > 0) then " +
	"redis.call('pexpire', KEYS[1], ARGV[2]); " +
	"redis.call('set', KEYS[3], 0, 'px', ARGV[5]); " +
	"return 0; " +
	"else " +
	"redis.call('del', KEYS[1]); " +
	"redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
	"redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
	"return 1; " +
	"end; "

// lockForceUnlockLua is RedissonLock.java forceUnlockAsync.
// KEYS = [name, channel]  ARGV = [0, publish command]  => 1 (deleted, 0 published) | 0.
const lockForceUnlockLua = "if (redis.call('del', KEYS[1]) == 1) then " +
	"redis.call(ARGV[2], KEYS[2], ARGV[1]); " +
	"return 1 " +
	"else " +
	"return 0 " +
	"end"

// renewLocksLua is renewal/LockTask.java buildChunk (the watchdog of RLocks and write locks).
// KEYS = [name...]  ARGV = [lease ms, field of each name...]  => {1 renewed | 0 gone, per name}.
const renewLocksLua = "local result = {} " +
	"for i = 1, #KEYS, 1 do " +
	"if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then " +
	"redis.call('pexpire', KEYS[i], ARGV[1]); " +
	"table.insert(result, 1); " +
	"else " +
	"table.insert(result, 0); " +
	"end; " +
	"end; " +
	"return result;"

// renewReadLocksLua is renewal/ReadLockTask.java buildChunk (the watchdog of read locks).
// KEYS = [name, key prefix]...  ARGV = [lease ms, (count, reader fields...) per name]  => {1 | 0, per name}.
const renewReadLocksLua = "local result = {} " +
	"local argIdx = 2 " +
	"for i = 1, #KEYS, 2 do " +
	"local anyAlive = false; " +
	"local lockNamesCount = tonumber(ARGV[argIdx]); " +
	"argIdx = argIdx + 1; " +
	"for k = 1, lockNamesCount do " +
	"local counter = redis.call('hget', KEYS[i], ARGV[argIdx]); " +
	"if (counter ~= false) then " +
	"anyAlive = true; " +
	"for c=counter, 1, -1 do " +
	"redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1]); " +
	"end; " +
	"end; " +
	"argIdx = argIdx + 1; " +
	"end; " +
	"if (anyAlive) then " +
	"redis.call('pexpire', KEYS[i], ARGV[1]); " +
	"table.insert(result, 1); " +
	"else " +
	"table.insert(result, 0); " +
	"end; " +
	"end; " +
	"return result;"

// readTryLockLua is RedissonReadLock.java tryLockInnerAsync.
// KEYS = [name, read timeout prefix]  ARGV = [lease ms, field, writer field]  => nil | pttl.
const readTryLockLua = "local mode = redis.call('hget', KEYS[1], 'mode'); " +
	"if (mode == false) then " +
	"redis.call('hset', KEYS[1], 'mode', 'read'); " +
	"redis.call('hset', KEYS[1], ARGV[2], 1); " +
	"redis.call('set', KEYS[2] .. ':1', 1); " +
	"redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); " +
	"redis.call('pexpire', KEYS[1], ARGV[1]); " +
	"return nil; " +
	"end; " +
	"if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then " +
	"local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
	"local key = KEYS[2] .. ':' .. ind;" +
	"redis.call('set', key, 1); " +
	"redis.call('pexpire', key, ARGV[1]); " +
	"local remainTime = redis.call('pttl', KEYS[1]); " +
	"redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); " +
	"return nil; " +
	"end;" +
	"return redis.call('pttl', KEYS[1]);"

// readUnlockLua is RedissonReadLock.java unlockInnerAsync.
// KEYS = [name, channel, read timeout prefix, key prefix, unlock latch]  ARGV = [0, field, publish command, latch ms]  => nil | 0 | 1 (hash deleted, 0 published).
const readUnlockLua = "local val = redis.call('get', KEYS[5]); " +
	"if val ~= false then " +
	"return tonumber(val);" +
	"end; " +
	"local mode = redis.call('hget', KEYS[1], 'mode'); " +
	"if (mode == false) then " +
	"redis.call(ARGV[3], KEYS[2], ARGV[1]); " +
	"redis.call('set', KEYS[5], 1, 'px', ARGV[4]); " +
	"return nil; " +
	"end; " +
	"local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); " +
	"if (lockExists == 0) then " +
	"return nil;" +
	"end; " +
	"local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); " +
	"if (counter == 0) then " +
	"redis.call('hdel', KEYS[1], ARGV[2]); " +
	"end;" +
	"redis.call('del', KEYS[3] .. ':' .. (counter+1)); " +
	"if (redis.call('hlen', KEYS[1]) > 1) then " +
	"local maxRemainTime = -3; " +
	"local keys = redis.call('hkeys', KEYS[1]); " +
	"for n, key in ipairs(keys) do " +
	"counter = tonumber(redis.call('hget', KEYS[1], key)); " +
	"if type(counter) == 'number' then " +
	"for i=counter, 1, -1 do " +
	"local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); " +
	"maxRemainTime = math.max(remainTime, maxRemainTime);" +
	"end; " +
	"end; " +
	"end; " +
	"if maxRemainTime > 0 then " +
	"redis.call('pexpire', KEYS[1], maxRemainTime); " +
	"redis.call('set', KEYS[5], 0, 'px', ARGV[4]); " +
	"return 0; " +
	"end;" +
	"if mode == 'write' then " +
	"redis.call('set', KEYS[5], 0, 'px', ARGV[4]); " +
	"return 0;" +
	"end; " +
	"end; " +
	"redis.call('del', KEYS[1]); " +
	"redis.call(ARGV[3], KEYS[2], ARGV[1]); " +
	"redis.call('set', KEYS[5], 1, 'px', ARGV[4]); " +
	"return 1; "

// readForceUnlockLua is RedissonReadLock.java forceUnlockAsync.
// KEYS = [name, channel]  ARGV = [0, publish command]  => 1 (mode was read) | 0.
const readForceUnlockLua = "if (redis.call('hget', KEYS[1], 'mode') == 'read') then " +
	"redis.call('del', KEYS[1]); " +
	"redis.call(ARGV[2], KEYS[2], ARGV[1]); " +
	"return 1; " +
	"end; " +
	"return 0; "

// readIsLockedLua is RedissonReadLock.java isLocked.
// KEYS = [name]  => 1 | 0.
const readIsLockedLua = "local mode = redis.call('hget', KEYS[1], 'mode'); " +
	"if (mode == 'read') or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then " +
	"return 1; " +
	"end; " +
	"return 0; "

// writeTryLockLua is RedissonWriteLock.java tryLockInnerAsync.
// KEYS = [name]  ARGV = [lease ms, writer field]  => nil | pttl.
const writeTryLockLua = "local mode = redis.call('hget', KEYS[1], 'mode'); " +
	"if (mode == false) then " +
	"redis.call('hset', KEYS[1], 'mode', 'write'); " +
	"redis.call('hset', KEYS[1], ARGV[2], 1); " +
	"redis.call('pexpire', KEYS[1], ARGV[1]); " +
	"return nil; " +
	"end; " +
	"if (mode == 'write') then " +
	"if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then " +
	"redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
	"local currentExpire = redis.call('pttl', KEYS[1]); " +
	"redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); " +
	"return nil; " +
	"end; " +
	"end;" +
	"return redis.call('pttl', KEYS[1]);"

// writeUnlockLua is RedissonWriteLock.java unlockInnerAsync.
// KEYS = [name, channel, unlock latch]  ARGV = [1, lease ms, writer field, publish command, latch ms]  => nil | 0 | 1 (released; 1 published only when no reader is left).
const writeUnlockLua = "local val = redis.call('get', KEYS[3]); " +
	"if val ~= false then " +
	"return tonumber(val);" +
	"end; " +
	"local mode = redis.call('hget', KEYS[1], 'mode'); " +
	"if (mode == false) then " +
	"redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
	"redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
	"return nil; " +
	"end;" +
	"if (mode == 'write') then " +
	"local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); " +
	"if (lockExists == 0) then " +
	"return nil;" +
	"else " +
	"local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
	"if (counter > 0) then " +
	"redis.call('pexpire', KEYS[1], ARGV[2]); " +
	"redis.call('set', KEYS[3], 0, 'px', ARGV[5]); " +
	"return 0; " +
	"else " +
	"redis.call('hdel', KEYS[1], ARGV[3]); " +
	"if (redis.call('hlen', KEYS[1]) == 1) then " +
	"redis.call('del', KEYS[1]); " +
	"redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
	"else " +
	"redis.call('hset', KEYS[1], 'mode', 'read'); " +
	"end; " +
	"redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
	"return 1; " +
	"end; " +
	"end; " +
	"end; " +
	"return nil;"

// writeForceUnlockLua is RedissonWriteLock.java forceUnlockAsync.
// KEYS = [name, channel]  ARGV = [1, publish command]  => 1 (mode was write) | 0.
const writeForceUnlockLua = "if (redis.call('hget', KEYS[1], 'mode') == 'write') then " +
	"redis.call('del', KEYS[1]); " +
	"redis.call(ARGV[2], KEYS[2], ARGV[1]); " +
	"return 1; " +
	"end; " +
	"return 0; "

// The scripts as rueidis runs them: EVALSHA, falling back to EVAL on NOSCRIPT. None is marked
// retryable: like Redisson's *NoRetry evals, a write whose outcome is unknown is not sent twice.
var (
	lockTryLock      = rueidis.NewLuaScript(lockTryLockLua)
	lockUnlock       = rueidis.NewLuaScript(lockUnlockLua)
	lockForceUnlock  = rueidis.NewLuaScript(lockForceUnlockLua)
	renewLocks       = rueidis.NewLuaScript(renewLocksLua)
	renewReadLocks   = rueidis.NewLuaScript(renewReadLocksLua)
	readTryLock      = rueidis.NewLuaScript(readTryLockLua)
	readUnlock       = rueidis.NewLuaScript(readUnlockLua)
	readForceUnlock  = rueidis.NewLuaScript(readForceUnlockLua)
	readIsLocked     = rueidis.NewLuaScript(readIsLockedLua)
	writeTryLock     = rueidis.NewLuaScript(writeTryLockLua)
	writeUnlock      = rueidis.NewLuaScript(writeUnlockLua)
	writeForceUnlock = rueidis.NewLuaScript(writeForceUnlockLua)
)
