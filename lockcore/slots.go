package lockcore

import (
	"strconv"
	"strings"
	"sync"
)

// Redis Cluster keeps each key in one of 16384 hash slots: CRC16 (XMODEM) of the key, or of its
// hash tag (the part between the first '{' and the next '}', when not empty), modulo 16384. Every
// key of one lock shares the lock's tag, so a lock lives in one slot; a multi-lock's members may
// live in several.

const slotCount = 16384

// keySlot is the Cluster hash slot of key.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % slotCount
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotFences is the fence floor of the slot of the lock with key lockKey, under prefix: a key
// under a hash tag of that slot (see deployment.fences).
func slotFences(prefix, lockKey string) string {
	return prefix + "{" + slotTags()[keySlot(lockKey)] + "}fence"
}

// slotTags holds, for every slot, a short string whose hash slot it is: a hash tag that puts a
// key or channel in that slot (the grants channel of the lock's slot, see chanPrefixFor).
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, slotCount)
	for i, left := 0, slotCount; left > 0; i++ {
		tag := strconv.Itoa(i)
		if s := int(crc16(tag)) % slotCount; tags[s] == "" {
			tags[s] = tag
			left--
		}
	}
	return tags
})
