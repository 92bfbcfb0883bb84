package lockcore

import (
	"sync"
	"time"
)

// contentionWindow is the span over which MostContended counts refusals and waits.
const contentionWindow = time.Minute

// contentionCap bounds the names counted per window, so that a flood of distinct names cannot
// grow memory: beyond it, new names are not counted until the window turns.
const contentionCap = 10000

// contention counts, per lock or semaphore, this replica's 409s and waits started in the current
// and the previous window: the most contended names, which a metric label could not carry.
type contention struct {
	mu        sync.Mutex
	turned    time.Time
	cur, prev map[Ref]int64
}

// add counts one refusal or wait on ref.
func (c *contention) add(ref Ref, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turn(now)
	if _, ok := c.cur[ref]; ok || len(c.cur) < contentionCap {
		c.cur[ref]++
	}
}

// turn starts a new window when the current one is over.
func (c *contention) turn(now time.Time) {
	switch {
	case c.cur == nil || now.Sub(c.turned) >= 2*contentionWindow:
		c.cur, c.prev, c.turned = map[Ref]int64{}, nil, now
	case now.Sub(c.turned) >= contentionWindow:
		c.cur, c.prev, c.turned = map[Ref]int64{}, c.cur, now
	}
}

// Contended is a name and its refusals and waits in the last window or two.
type Contended struct {
	Ref   Ref
	Count int64
}
