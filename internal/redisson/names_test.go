package redisson

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestScriptsVerbatim pins each script to the SHA1 of the Java string it copies, computed from
// redisson/redisson at 66863978 (the literals of the method named in scripts.go, concatenated):
// Redis caches scripts by SHA1, so equal hashes mean byte-identical scripts.
func TestScriptsVerbatim(t *testing.T) {
	for _, tc := range []struct {
		name, script, sha1 string
	}{
		{"RedissonLock.tryLockInnerAsync", lockTryLockLua, "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"},
		{"RedissonLock.unlockInnerAsync", lockUnlockLua, "6866459238a13a701d42f4971f12d9f3a50e2442"},
		{"RedissonLock.forceUnlockAsync", lockForceUnlockLua, "605e338249a7a1d40df83b04f7658354f883b41b"},
		{"LockTask.buildChunk", renewLocksLua, "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635"},
		{"ReadLockTask.buildChunk", renewReadLocksLua, "38d2b478dfbe264ab67c221b7e4be62245f00ba0"},
		{"RedissonReadLock.tryLockInnerAsync", readTryLockLua, "95553a6ff11176c18e71344e89d116b06fd6f753"},
		{"RedissonReadLock.unlockInnerAsync", readUnlockLua, "6e1b10e11ac0a3ed8e902562ecd32ce01b553039"},
		{"RedissonReadLock.forceUnlockAsync", readForceUnlockLua, "27dbe744e95c1d854a7f556cc6817030de2d0d01"},
		{"RedissonReadLock.isLocked", readIsLockedLua, "8ad44f1ba014938c20da38206b6d496c85ec1aed"},
		{"RedissonWriteLock.tryLockInnerAsync", writeTryLockLua, "6306ba3bf1f563b284bed52d305fce615c6664d9"},
		{"RedissonWriteLock.unlockInnerAsync", writeUnlockLua, "21f5fb0f8ddfa9be5c3e0c9757c128796add75c6"},
		{"RedissonWriteLock.forceUnlockAsync", writeForceUnlockLua, "2e2cb2a3b13e2e80e4236ef6a25beaf365dba608"},
	} {
		sum := sha1.Sum([]byte(tc.script))
		assert.Equal(t, tc.sha1, hex.EncodeToString(sum[:]), tc.name)
	}
}

func TestNames(t *testing.T) {
	const field = "2b1a0c52-7d3e-4f7a-9a51-3f0d6f1e2c4d:7"
	for _, tc := range []struct {
		name                                       string
		lockChannel, rwChannel, latch, readTimeout string
		keyPrefix                                  string
	}{
		{name: "orders",
			lockChannel: "redisson_lock__channel:{orders}", rwChannel: "redisson_rwlock:{orders}",
			latch: "redisson_unlock_latch:{orders}:r1", readTimeout: "{orders}:" + field + ":rwlock_timeout",
			keyPrefix: "{orders}"},
		{name: "shop{eu}:cart", // a name with its own hash tag keeps it: no braces added
			lockChannel: "redisson_lock__channel:shop{eu}:cart", rwChannel: "redisson_rwlock:shop{eu}:cart",
			latch: "redisson_unlock_latch:shop{eu}:cart:r1", readTimeout: "shop{eu}:cart:" + field + ":rwlock_timeout",
			keyPrefix: "shop{eu}:cart"},
		{name: "{leading",
			lockChannel: "redisson_lock__channel:{leading", rwChannel: "redisson_rwlock:{leading",
			latch: "redisson_unlock_latch:{leading:r1", readTimeout: "{leading:" + field + ":rwlock_timeout",
			keyPrefix: "{leading"},
	} {
		assert.Equal(t, tc.lockChannel, lockChannel(tc.name), tc.name)
		assert.Equal(t, tc.rwChannel, rwlockChannel(tc.name), tc.name)
		assert.Equal(t, tc.latch, unlockLatchName(tc.name, "r1"), tc.name)
		timeoutPrefix := readTimeoutPrefix(tc.name, field)
		assert.Equal(t, tc.readTimeout, timeoutPrefix, tc.name)
		assert.Equal(t, tc.keyPrefix, readKeyPrefix(timeoutPrefix, field), tc.name)
	}
	assert.Equal(t, "id:42", holderField("id", 42))
	assert.Equal(t, "id:42:write", writerField("id", 42))
	assert.Len(t, newRequestID(), 32)
}
