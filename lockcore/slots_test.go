package lockcore

import "testing"

// The slots of known keys, as CLUSTER KEYSLOT answers on Redis 7.0.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "": 0, "leasegate:{orders.42}:q": keySlot("orders.42"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	tags := slotTags()
	for _, slot := range []int{0, 1, 5061, 16383} {
		if got := keySlot("{" + tags[slot] + "}x"); got != slot {
			t.Errorf("the tag of slot %d, %q, is in slot %d", slot, tags[slot], got)
		}
	}
}

// A lock's fence floor lives in the lock's slot, so that the lock's scripts may take it beside the
// lock's own keys on a Cluster (and on RedLock, names of different slots have floors apart).
func TestSlotFencesShareTheLocksSlot(t *testing.T) {
	for _, name := range []string{"a", "orders.42", "x:y:z", "123", "Ω", "a-long-name-" + string(make([]byte, 40))} {
		for _, key := range []string{"p:{" + name + "}", "p:{" + name + "}:sem"} {
			floor := slotFences("p:", key)
			if keySlot(floor) != keySlot(key) {
				t.Errorf("the fence floor %q of %q is in slot %d, the lock in %d", floor, key, keySlot(floor), keySlot(key))
			}
		}
	}
	if a, b := slotFences("p:", "p:{a}"), slotFences("p:", "p:{a}:sem"); a != b {
		t.Errorf("a lock and a semaphore of one name have floors %q and %q", a, b)
	}
}
