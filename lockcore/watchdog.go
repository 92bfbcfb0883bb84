package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Watchdog duties live in Redis, not in the process that granted the lease: a registry zset maps
// "<lock>\n<lease>" to when its next renewal is due. Every replica sweeps it, so a watchdog lease
// outlives the replica that granted it; renewal is idempotent, and a claim pushes due entries a
// little forward so that replicas rarely renew the same lease twice.
const (
	sweepEvery = 100 * time.Millisecond // how often a replica looks for due renewals
	claimHold  = 250 * time.Millisecond // a claimed duty is retried after this if its renewal fails
	sweepBatch = 256                    // duties claimed per round trip
)

// enroll records the watchdog duty of a new grant, first due a third of its TTL from now.
func (s *Service) enroll(ctx context.Context, g Grant) error {
	_, err := s.dutiesScript.Exec(context.WithoutCancel(ctx), s.client, []string{s.duties},
		[]string{"enroll", dutyMember(g.Lock, g.ID), ms(g.TTL / 3)}).ToInt64()
	if err != nil {
		return s.classify(err)
	}
	return nil
}

// dropDuty forgets a released lease's duty. A failure is harmless: the next sweep finds the lease
// gone and drops it then.
func (s *Service) dropDuty(ctx context.Context, l Lease) {
	err := s.client.Do(context.WithoutCancel(ctx), s.client.B().Zrem().Key(s.duties).Member(dutyMember(l.Lock, l.ID)).Build()).Error()
	if err != nil {
		s.log.Warn("dropping a watchdog duty failed; the next sweep drops it", "lock", l.Lock, "err", err)
	}
}

func dutyMember(lock, lease string) string { return lock + "\n" + lease }

// sweep renews due watchdog leases until the Service closes.
func (s *Service) sweep() {
	defer s.wg.Done()
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		for s.ctx.Err() == nil && s.sweepOnce() == sweepBatch {
		}
	}
}

// sweepOnce claims a batch of due duties, renews them concurrently (rueidis pipelines the calls)
// and records the outcome in two commands. It returns how many duties it claimed.
func (s *Service) sweepOnce() int {
	ctx := s.ctx
	// Peek first, so that an idle sweep is one cheap read and no script. The peek compares Redis
	// times with this host's clock, with sweepEvery of slack; the claim itself uses Redis time.
	first, err := s.client.Do(ctx, s.client.B().Zrange().Key(s.duties).Min("0").Max("0").Withscores().Build()).AsZScores()
	if err != nil || len(first) == 0 || first[0].Score > float64(time.Now().Add(sweepEvery).UnixMilli()) {
		return 0
	}
	due, err := s.dutiesScript.Exec(ctx, s.client, []string{s.duties},
		[]string{"claim", ms(claimHold), strconv.Itoa(sweepBatch)}).AsStrSlice()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("watchdog sweep failed; retrying", "err", err)
		}
		return 0
	}
	type outcome struct {
		member string
		due    int64 // > 0: renewed, next due then; 0: drop; < 0: failed, retry after claimHold
	}
	outcomes := make([]outcome, len(due))
	var wg sync.WaitGroup
	for i, member := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i] = outcome{member: member, due: s.renewDuty(ctx, member)}
		}()
	}
	wg.Wait()

	zadd := s.client.B().Zadd().Key(s.duties).Xx().ScoreMember()
	var renewed, dropped []string
	for _, o := range outcomes {
		switch {
		case o.due > 0:
			zadd = zadd.ScoreMember(float64(o.due), o.member)
			renewed = append(renewed, o.member)
		case o.due == 0:
			dropped = append(dropped, o.member)
		}
	}
	var cmds rueidis.Commands
	if len(renewed) > 0 {
		cmds = append(cmds, zadd.Build())
	}
	if len(dropped) > 0 {
		cmds = append(cmds, s.client.B().Zrem().Key(s.duties).Member(dropped...).Build())
	}
	for _, res := range s.client.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil && ctx.Err() == nil {
			s.log.Warn("watchdog registry update failed; the duties are retried", "err", err)
		}
	}
	return len(due)
}

// renewDuty renews the lease of one duty. It returns when the next renewal is due (Redis time in
// ms), 0 when the duty is over, or -1 when the renewal failed and must be retried.
func (s *Service) renewDuty(ctx context.Context, member string) int64 {
	lock, lease, ok := strings.Cut(member, "\n")
	if !ok {
		return 0
	}
	r, err := s.watchdog.Exec(ctx, s.client, []string{s.keys(lock).lock}, []string{lease}).AsIntSlice()
	if err == nil && (len(r) == 0 || (r[0] == 1 && len(r) != 2)) {
		err = fmt.Errorf("unexpected reply %v", r)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return -1
		}
		s.failures.Add(1)
		s.log.Warn("watchdog renewal failed; retrying", "lock", lock, "err", err, "failures", s.failures.Load())
		return -1
	}
	if r[0] == 0 {
		return 0
	}
	return r[1]
}
