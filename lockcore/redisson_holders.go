package lockcore

import "time"

// RedissonHolder is a Redisson client's hold of a name shared with Redisson: its hash field
// (`<client id>:<thread id>`, `:write` after a writer's), the mode it holds (a read-write lock's
// reader holds it shared), its re-entry count and the time Redisson's object has left.
type RedissonHolder struct {
	Field string
	Mode  Mode
	Holds int64
	TTL   time.Duration
}

// readRedissonHolders reads inspect.lua's section of Redisson's own holders,
// {count, [field, mode ('x'|'s'), holds, pttl]...}, and returns what follows it.
func readRedissonHolders(r []any) ([]RedissonHolder, []any, bool) {
	n, ok := r[0].(int64)
	if !ok || int64(len(r)) < 1+4*n {
		return nil, nil, false
	}
	var out []RedissonHolder
	for r = r[1:]; n > 0; r, n = r[4:], n-1 {
		field, ok1 := r[0].(string)
		mode, ok2 := r[1].(string)
		holds, ok3 := r[2].(int64)
		pttl, ok4 := r[3].(int64)
		if !(ok1 && ok2 && ok3 && ok4) {
			return nil, nil, false
		}
		m := Exclusive
		if mode == "s" {
			m = Shared
		}
		out = append(out, RedissonHolder{Field: field, Mode: m, Holds: holds, TTL: time.Duration(pttl) * time.Millisecond})
	}
	return out, r, true
}
