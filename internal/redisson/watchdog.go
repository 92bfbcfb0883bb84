package redisson

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The watchdog, after redisson/src/main/java/org/redisson/renewal/ (LockRenewalScheduler,
// RenewalTask, LockTask, ReadLockTask, LockEntry, ReadLockEntry): per Client one task for RLocks
// and write locks and one for read locks. A task runs while it has names to renew: every third of
// the watchdog timeout (counted from the end of the previous round) it renews each name with its
// script, and drops a thread's hold from a name the script finds gone (reply 0). A Redis error
// skips the name for that round. A hold taken with an explicit lease is never on the watchdog.
//
// Java batches names into one script call per chunk (per slot on a Cluster); here each name is
// renewed by its own call of the same script, a chunk of one.

// renewals is the Client's LockRenewalScheduler.
type renewals struct {
	locks *renewalTask // LockTask
	reads *renewalTask // ReadLockTask
}

func newRenewals(c *Client) *renewals {
	return &renewals{
		locks: &renewalTask{c: c, entries: map[string]*renewalEntry{}, renew: renewLock},
		reads: &renewalTask{c: c, entries: map[string]*renewalEntry{}, renew: renewReadLock},
	}
}

// renewalTask is a RenewalTask: the names it renews and the goroutine renewing them.
type renewalTask struct {
	c *Client
	// renew renews one name and returns the threads whose holds must leave the watchdog.
	renew func(ctx context.Context, c *Client, name string, e renewalEntry) ([]int64, error)

	mu      sync.Mutex
	entries map[string]*renewalEntry
	stop    chan struct{} // while running (RenewalTask.running): closed to stop the goroutine
	rounds  int           // rounds run, for tests
}

// renewalEntry is LockEntry / ReadLockEntry: one name's holds on the watchdog.
type renewalEntry struct {
	queue      []int64          // threadsQueue: a thread id per hold
	counter    map[int64]int    // threadId2counter
	fields     map[int64]string // threadId2lockName
	keyPrefix  map[int64]string // ReadLockEntry.threadId2keyPrefix
	firstField string           // filled in for renew: the first thread's field
}

// add is RenewalTask.add (ReadLockTask.add for read locks): one more hold of threadID on name,
// starting the task if it was idle.
func (t *renewalTask) add(name string, threadID int64, field, keyPrefix string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.c.ctx.Err() != nil {
		return // shutting down: Redisson schedules nothing either
	}
	e := t.entries[name]
	if e == nil {
		e = &renewalEntry{counter: map[int64]int{}, fields: map[int64]string{}, keyPrefix: map[int64]string{}}
		t.entries[name] = e
	}
	e.counter[threadID]++
	e.queue = append(e.queue, threadID)
	if _, ok := e.fields[threadID]; !ok {
		e.fields[threadID] = field
		e.keyPrefix[threadID] = keyPrefix
	}
	if t.stop == nil {
		t.stop = make(chan struct{})
		t.c.wg.Add(1)
		go t.run(t.stop)
	}
}

// cancel is RenewalTask.cancelExpirationRenewal: one hold of threadID leaves name's entry (the
// whole entry when all is set, Java's threadId == null); an empty entry is dropped, and an empty
// task stops.
func (t *renewalTask) cancel(name string, threadID int64, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[name]
	if e == nil {
		return
	}
	if !all && e.counter[threadID] > 0 { // LockEntry.removeThreadId
		e.counter[threadID]--
		if e.counter[threadID] == 0 {
			delete(e.counter, threadID)
			delete(e.fields, threadID)
			delete(e.keyPrefix, threadID)
			e.queue = slices.DeleteFunc(e.queue, func(id int64) bool { return id == threadID })
		}
	}
	if all || len(e.queue) == 0 {
		delete(t.entries, name)
	}
	if len(t.entries) == 0 && t.stop != nil {
		close(t.stop)
		t.stop = nil
	}
}

// watching reports whether name has holds on this task, and whether the task runs.
func (t *renewalTask) watching(name string) (held, running bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, held = t.entries[name]
	return held, t.stop != nil
}

// run renews every third of the watchdog timeout until stop closes or the Client closes.
func (t *renewalTask) run(stop <-chan struct{}) {
	defer t.c.wg.Done()
	period := t.c.opts.WatchdogTimeout / 3
	timer := time.NewTimer(period)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.c.ctx.Done():
			return
		case <-timer.C:
		}
		t.round(period)
		timer.Reset(period)
	}
}

// round renews each name once (RenewalTask.execute), each call bounded by period.
func (t *renewalTask) round(period time.Duration) {
	t.mu.Lock()
	t.rounds++
	snapshot := make(map[string]renewalEntry, len(t.entries))
	for name, e := range t.entries {
		if len(e.queue) == 0 {
			continue
		}
		s := renewalEntry{queue: []int64{e.queue[0]}, fields: maps.Clone(e.fields), keyPrefix: maps.Clone(e.keyPrefix)}
		s.firstField = e.fields[e.queue[0]]
		snapshot[name] = s
	}
	t.mu.Unlock()
	for name, e := range snapshot {
		ctx, cancel := context.WithTimeout(t.c.ctx, period)
		gone, err := t.renew(ctx, t.c, name, e)
		cancel()
		if err != nil {
			continue // Java logs "Can't update locks ... expiration" and tries again next round
		}
		for _, id := range gone {
			t.cancel(name, id, false)
		}
	}
}

// renewLock is LockTask.buildChunk for one name: the first thread's field must still be in the
// hash, whose expiry is then reset to the watchdog timeout; else that thread leaves the watchdog.
func renewLock(ctx context.Context, c *Client, name string, e renewalEntry) ([]int64, error) {
	reply, err := renewLocks.Exec(ctx, c.rc, []string{name}, []string{ms(c.opts.WatchdogTimeout), e.firstField}).AsIntSlice()
	if err != nil {
		return nil, err
	}
	if len(reply) == 1 && reply[0] == 1 {
		return nil, nil
	}
	return e.queue[:1], nil
}

// renewReadLock is ReadLockTask.buildChunk for one name: every read-hold key of every reader of
// this instance on the name gets the watchdog timeout again, and so does the hash if any of them
// still reads; else all of them leave the watchdog.
func renewReadLock(ctx context.Context, c *Client, name string, e renewalEntry) ([]int64, error) {
	keys := []string{name, e.keyPrefix[e.queue[0]]}
	args := []string{ms(c.opts.WatchdogTimeout), strconv.Itoa(len(e.fields))}
	threads := make([]int64, 0, len(e.fields))
	for id, field := range e.fields {
		args = append(args, field)
		threads = append(threads, id)
	}
	reply, err := renewReadLocks.Exec(ctx, c.rc, keys, args).AsIntSlice()
	if err != nil {
		return nil, err
	}
	if len(reply) == 1 && reply[0] == 1 {
		return nil, nil
	}
	return threads, nil
}
