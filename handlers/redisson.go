package handlers

import (
	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/lockcore"
)

// How the holders that are Redisson's own clients (a name shared with Redisson, see
// docs/redisson.md) are rendered: in a lock's state, and in the listing.

// addRedissonHolders adds st's Redisson holders to a lock's state body; the mode is theirs when
// no gateway lease holds the lock.
func addRedissonHolders(body *api.LockState, st lockcore.State) {
	for _, h := range st.Redisson {
		body.RedissonHolders = append(body.RedissonHolders, api.RedissonHolder{Field: h.Field, Mode: string(h.Mode), Holds: h.Holds,
			TTLms: h.TTL.Milliseconds()})
		if body.Mode == "" {
			body.Mode = string(h.Mode)
		}
	}
}

// listRedissonHolder fills a listing's entry from st's first Redisson holder, reporting whether
// there is one: a lock held by Redisson's clients alone has no fence, age or watchdog.
func listRedissonHolder(l *api.ListedLock, st lockcore.State) bool {
	if len(st.Redisson) == 0 {
		return false
	}
	r := st.Redisson[0]
	l.Mode, l.Holders, l.Owner, l.TTLms = string(r.Mode), int64(len(st.Redisson)), r.Field, r.TTL.Milliseconds()
	return true
}

// listedRedissonHolders lists st's Redisson holders in a listing, marked redisson; modes only for
// a lock's (withMode).
func listedRedissonHolders(st lockcore.State, withMode bool) []api.ListedHolder {
	out := make([]api.ListedHolder, 0, len(st.Redisson))
	for _, h := range st.Redisson {
		l := api.ListedHolder{Owner: h.Field, Holds: h.Holds, TTLms: h.TTL.Milliseconds(), Redisson: true}
		if withMode {
			l.Mode = string(h.Mode)
		}
		out = append(out, l)
	}
	return out
}
