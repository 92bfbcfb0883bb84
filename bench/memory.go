package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// memoryPrefix is the default key prefix, so that key lengths are those of a default deployment.
const memoryPrefix = "leasegate:"

// memoryEnv is what a memory row's steps work with: a Service of the row's own, a client of the
// same Redis, and the server.
type memoryEnv struct {
	svc    *lockcore.Service
	client rueidis.Client
	redis  *harness.Redis
}

// memoryRow is one way of holding a lock whose Redis cost the memory scenario measures: setup
// makes n of it (the i-th on name i) on a Service of the row's own, after which the row's
// holds are counted; n is how many things the figures are per.
type memoryRow struct {
	name string
	per  string // what one unit is: "held lock", "reader", "waiter"...
	// base, when set, is taken before the measured step (its memory is not counted), e.g. the
	// holders a waiter queues behind.
	base  func(ctx context.Context, e memoryEnv, n int) (func(), error)
	setup func(ctx context.Context, e memoryEnv, n int) (func(), error)
	// sample names one lock whose keys are shown with MEMORY USAGE and OBJECT ENCODING ("": none).
	sample string

	bytes, keys []float64
	usage       string
}

// memory measures the Redis memory and keys each kind of hold costs: used_memory (INFO memory)
// and DBSIZE growth over n holds of each kind, rows interleaved round by round, beside Redisson's
// RLock layout written directly (a hash per lock: "<uuid>:<thread id>" -> count, PEXPIRE).
// used_memory counts what the allocator handed out for the keys, their values, the expires
// entries and the dicts' slots, which MEMORY USAGE of one key leaves out.
func memory(redis *harness.Redis) error {
	n := *holdsFlag
	exclusive := func(watchdog bool) func(context.Context, memoryEnv, int) (func(), error) {
		return func(ctx context.Context, e memoryEnv, n int) (func(), error) {
			return nil, parallel(n, func(i int) error {
				_, err := e.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: memName(i), Owner: "bench", TTL: 5 * time.Minute,
					Watchdog: watchdog, MaxHold: time.Hour})
				return err
			})
		}
	}
	rows := []*memoryRow{
		{name: "exclusive", per: "held lock", setup: exclusive(false), sample: memName(0)},
		{name: "exclusive + watchdog", per: "held lock", setup: exclusive(true), sample: memName(0)},
		{name: "shared, 2 readers", per: "lock read by 2", sample: memName(0),
			setup: func(ctx context.Context, e memoryEnv, n int) (func(), error) {
				return nil, parallel(2*n, func(i int) error {
					_, err := e.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: memName(i / 2), Mode: lockcore.Shared, Owner: "bench", TTL: 5 * time.Minute})
					return err
				})
			}},
		{name: "semaphore, 1 permit", per: "semaphore with 1 permit held", sample: memName(0),
			setup: func(ctx context.Context, e memoryEnv, n int) (func(), error) {
				return nil, parallel(n, func(i int) error {
					_, err := e.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: memName(i), Kind: lockcore.KindSemaphore, Permits: 10,
						Owner: "bench", TTL: 5 * time.Minute})
					return err
				})
			}},
		{name: "semaphore, more permits", per: "permit (n on 1 semaphore of n)", sample: "sem-many",
			setup: func(ctx context.Context, e memoryEnv, n int) (func(), error) {
				return nil, parallel(n, func(int) error {
					_, err := e.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "sem-many", Kind: lockcore.KindSemaphore, Permits: int64(n),
						Owner: "bench", TTL: 5 * time.Minute})
					return err
				})
			}},
		{name: "waiter, 1 per lock", per: "waiter (on a held lock)", sample: memName(0),
			base: exclusive(false), setup: waitingOn(func(i int) string { return memName(i) })},
		{name: "waiters, 1 lock", per: "waiter (n in one queue)", sample: "crowded",
			base: func(ctx context.Context, e memoryEnv, _ int) (func(), error) {
				_, err := e.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "crowded", Owner: "bench", TTL: 5 * time.Minute})
				return nil, err
			}, setup: waitingOn(func(int) string { return "crowded" })},
		{name: "Redisson RLock layout", per: "held lock", sample: "",
			setup: func(ctx context.Context, e memoryEnv, n int) (func(), error) {
				return nil, parallel(n, func(i int) error {
					key := memName(i) // Redisson keys a lock by its bare name
					for _, res := range e.client.DoMulti(ctx,
						e.client.B().Hset().Key(key).FieldValue().FieldValue(uuid.NewString()+":1", "1").Build(),
						e.client.B().Pexpire().Key(key).Milliseconds(300000).Build()) {
						if err := res.Error(); err != nil {
							return err
						}
					}
					return nil
				})
			}},
	}
	for round := range *rounds {
		for _, r := range rows {
			if err := r.measure(redis, n, round == 0); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
		}
	}
	fmt.Printf("Redis memory per hold: used_memory and DBSIZE growth over %d holds of each kind (prefix %q, names \"orders-<i>\", %d rounds interleaved; median, range):\n",
		n, memoryPrefix, *rounds)
	for _, r := range rows {
		fmt.Printf("  %-24s %5.0f B (%s) and %.2f keys per %s\n", r.name, median(r.bytes),
			span(r.bytes, func(v float64) float64 { return v }, "%.0f"), median(r.keys), r.per)
	}
	fmt.Println("one sample's keys, then the keys all holds share (MEMORY USAGE in bytes, OBJECT ENCODING):")
	for _, r := range rows {
		if r.usage != "" {
			fmt.Printf("  %-24s %s\n", r.name, r.usage)
		}
	}
	return nil
}

// measure runs one round of r: a fresh database and Service, the row's base, then its holds,
// measured around the latter.
func (r *memoryRow) measure(redis *harness.Redis, n int, first bool) error {
	if _, err := redis.Do("FLUSHALL"); err != nil {
		return err
	}
	client, err := rueidis.NewClient(lockcore.ClientOption(redis.Addr, ""))
	if err != nil {
		return err
	}
	defer client.Close()
	tokens, _ := lockcore.NewTokens([]byte(harness.TestTokenSecret))
	svc, err := lockcore.New(client, tokens, lockcore.Options{KeyPrefix: memoryPrefix})
	if err != nil {
		return err
	}
	defer svc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Warm up: load the scripts (Redis keeps their source) on a name that is then freed.
	e := memoryEnv{svc: svc, client: client, redis: redis}
	g, err := svc.Acquire(ctx, lockcore.AcquireRequest{Lock: "warm-up", Owner: "bench", TTL: time.Minute})
	if err != nil {
		return err
	}
	if _, err := svc.Release(ctx, lockcore.ReleaseRequest{Ref: lockcore.LockRef("warm-up"), Token: g.Token}); err != nil {
		return err
	}
	if r.base != nil {
		stop, err := r.base(ctx, e, n)
		if err != nil {
			return err
		}
		if stop != nil {
			defer stop()
		}
	}
	mem0, keys0, err := usage(redis)
	if err != nil {
		return err
	}
	stop, err := r.setup(ctx, e, n)
	if err != nil {
		return err
	}
	if stop != nil {
		defer stop()
	}
	mem1, keys1, err := usage(redis)
	if err != nil {
		return err
	}
	r.bytes = append(r.bytes, float64(mem1-mem0)/float64(n))
	r.keys = append(r.keys, float64(keys1-keys0)/float64(n))
	if first && r.sample != "" {
		r.usage = sampleUsage(redis, r.sample, n)
	}
	_, err = redis.Do("FLUSHALL")
	return err
}

// sampleUsage lists the keys of the lock (or semaphore) name, and the keys every lock shares (no
// hash tag of a name: the fence floor, the watchdog's schedule), with their MEMORY USAGE and
// encoding; a shared key's is also shown per unit (n units).
func sampleUsage(redis *harness.Redis, name string, n int) string {
	var shared []string
	own, _ := redis.DoList("KEYS", memoryPrefix+"{"+name+"}*")
	all, _ := redis.DoList("KEYS", memoryPrefix+"*")
	for _, k := range all {
		if !strings.Contains(k, "{") {
			shared = append(shared, k)
		}
	}
	slices.Sort(own)
	slices.Sort(shared)
	var parts []string
	for _, key := range append(own, shared...) {
		size, err := redis.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
		if err != nil || size == "" {
			continue
		}
		enc, _ := redis.Do("OBJECT", "ENCODING", key)
		part := fmt.Sprintf("%s %s (%s)", strings.TrimPrefix(key, memoryPrefix), size, enc)
		if !strings.Contains(key, "{") {
			b, _ := strconv.ParseFloat(size, 64)
			part += fmt.Sprintf(" = %.0f per unit", b/float64(n))
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// usage returns used_memory and DBSIZE.
func usage(redis *harness.Redis) (mem, keys int64, err error) {
	info, err := redis.Do("INFO", "memory")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			mem, err = strconv.ParseInt(v, 10, 64)
		}
	}
	if err != nil || mem == 0 {
		return 0, 0, fmt.Errorf("no used_memory in INFO memory: %v", err)
	}
	size, err := redis.Do("DBSIZE")
	if err != nil {
		return 0, 0, err
	}
	keys, err = strconv.ParseInt(size, 10, 64)
	return mem, keys, err
}

// waitingOn starts one waiting acquire per unit on the name lock(i) and returns once every one of
// them is in its line (each queue entry is in the queue's zset); the returned stop ends them.
func waitingOn(lock func(i int) string) func(context.Context, memoryEnv, int) (func(), error) {
	return func(ctx context.Context, e memoryEnv, n int) (func(), error) {
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				_, err := e.svc.Acquire(ctx, lockcore.AcquireRequest{Lock: lock(i), Owner: "bench", TTL: 5 * time.Minute, Wait: 4 * time.Minute})
				if err != nil && !errors.Is(err, context.Canceled) {
					errs <- err
				}
			})
		}
		stop := func() { cancel(); wg.Wait() }
		deadline := time.Now().Add(time.Minute)
		for {
			queued, err := queuedCount(ctx, e.client, lock, n)
			if err != nil {
				stop()
				return nil, err
			}
			if queued == n {
				return stop, nil
			}
			select {
			case err := <-errs:
				stop()
				return nil, err
			case <-time.After(20 * time.Millisecond): // polling back-off
			}
			if time.Now().After(deadline) {
				stop()
				return nil, fmt.Errorf("%d of %d waiters queued after a minute", queued, n)
			}
		}
	}
}

// queuedCount is how many of the n waiters on lock(i) are in their queue.
func queuedCount(ctx context.Context, client rueidis.Client, lock func(i int) string, n int) (int, error) {
	seen := map[string]bool{}
	var cmds rueidis.Commands
	for i := range n {
		name := lock(i)
		if !seen[name] {
			seen[name] = true
			cmds = append(cmds, client.B().Zcard().Key(memoryPrefix+"{"+name+"}:q").Build())
		}
	}
	total := 0
	for _, r := range client.DoMulti(ctx, cmds...) {
		k, err := r.AsInt64()
		if err != nil {
			return 0, err
		}
		total += int(k)
	}
	return total, nil
}

// parallel runs f(0..n-1) on 16 goroutines and returns the first error.
func parallel(n int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
		fail error
	)
	for range 16 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := fail != nil
				mu.Unlock()
				if stop || i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					fail = cmpErr(fail, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return fail
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func memName(i int) string { return "orders-" + strconv.Itoa(i) }
