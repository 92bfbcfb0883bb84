package faultcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/internal/redisson"
)

// Redisson-protocol clients in the workload (-faultcheck.redisson, on every deployment but
// RedLock): the gateways share the checked locks' names with Redisson (LEASEGATE_REDISSON_LOCKS),
// and these clients take the same locks as Java Redisson does (internal/redisson: its scripts, its
// subscribe-then-retry waiting), beside the gateway's clients. Their holds go into the history
// like the gateway's grants, with no fence (Redisson's holds have none) and no writes to the
// fenced store. Redisson's own writes wait for no replica, so a fault may lose its holds: one
// counts in the mutual-exclusion check only once its unlock answered (Redis had it then), as
// mayLoseGrants counts the gateway's leases.

// redissonPrefix is the prefix of the checked locks the gateways share with Redisson.
const redissonPrefix = "fc-"

// redissonClient is a Redisson instance on the deployment, with a rueidis client of its own;
// sharded on a Redis Cluster, as Redisson 3.22+ is there.
func (fc *faultCheck) redissonClient() (*redisson.Client, func(), error) {
	var opt rueidis.ClientOption
	if g := fc.d.gateway; g.RedisURL != "" {
		o, err := rueidis.ParseURL(g.RedisURL)
		if err != nil {
			return nil, nil, err
		}
		opt = o
	} else {
		opt = rueidis.ClientOption{InitAddress: []string{g.Redis.Addr}, ForceSingleClient: true}
	}
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, err
	}
	c := redisson.New(rc, redisson.Options{Sharded: rc.Mode() == rueidis.ClientModeCluster})
	return c, func() { c.Close(); rc.Close() }, nil
}

// redissonWorker is one Redisson client thread: over and over it waits for a checked lock with
// tryLock(waitFor, leaseTTL), works under it, and unlocks it (or, now and then, lets it run out).
func (fc *faultCheck) redissonWorker(i int, c *redisson.Client, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(1000+i), uint64(time.Now().UnixNano())))
	var names []string
	for _, n := range fc.locks {
		if !isElection(n) {
			names = append(names, n)
		}
	}
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		name := names[rng.IntN(len(names))]
		l := c.Lock(name, int64(i+1))
		ctx, cancel := context.WithTimeout(context.Background(), waitFor+5*time.Second)
		sent := time.Now()
		ok, err := l.TryLock(ctx, waitFor, leaseTTL)
		answered := time.Now()
		cancel()
		if err != nil {
			// The try's outcome is unknown: it may hold until its lease runs out.
			fc.h.unknownHold(name, answered, sent.Add(leaseTTL))
			<-time.After(50 * time.Millisecond) // retry back-off
			continue
		}
		if !ok {
			continue
		}
		h := &held{lock: name, owner: fmt.Sprintf("r%02d-%d", i, k), sent: sent, answered: answered,
			validUntil: sent.Add(leaseTTL), redisson: true}
		work := time.Duration(rng.IntN(300)) * time.Millisecond
		if left := time.Until(h.validUntil) - 100*time.Millisecond; work > left {
			work = max(left, 0)
		}
		<-time.After(work) // the work under the lock
		if rng.IntN(10) == 0 {
			h.released = h.validUntil // abandoned: it runs out
			fc.h.add(h)
			continue
		}
		h.releaseSent = time.Now()
		uctx, ucancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = l.Unlock(uctx)
		ucancel()
		switch {
		case errors.Is(err, redisson.ErrIllegalMonitorState):
			h.lost(time.Now(), "unlock: not held")
		case err != nil:
			h.released, h.unanswered = h.releaseSent, true
			fc.h.unknownHold(name, h.releaseSent, h.end())
		default:
			h.released, h.confirmed = h.releaseSent, true
		}
		fc.h.add(h)
	}
}
