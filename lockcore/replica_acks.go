package lockcore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"

	"github.com/redis/rueidis"
)

// Replica-acknowledged grants (Options.ReplicaAcks): every script that grants or extends a hold
// (acquire, re-entry, renewal and a waiter's confirmation, a multi-lock's acquire and renewal) is
// followed by WAIT on the same connection, and a grant that fewer replicas acknowledge in time is
// undone and answered ErrUnavailable. A failover to an up-to-date replica then loses no grant the
// client was told about. Releases, dequeues and heartbeats are not waited for: losing one leaves a
// hold in place until it runs out, never lets a second holder in; nor are the watchdog's renewals,
// which come every third of a TTL and are carried on by the new master.
//
// WAIT counts only the writes of the connection it is sent on, so it goes in one DoMulti with the
// script: rueidis sends a DoMulti holding a blocking command (WAIT is one) on one dedicated
// connection, in order. That also means no auto-pipelining for acknowledged calls: the cost is
// measured in docs/performance.md.

// errNotAcked: fewer replicas than asked acknowledged a write in time. It matches ErrUnavailable.
type notAckedError struct{ got, want int64 }

func (e *notAckedError) Error() string {
	return fmt.Sprintf("%s: %d of %d replicas acknowledged the grant in time", ErrUnavailable, e.got, e.want)
}

func (e *notAckedError) Unwrap() error { return ErrUnavailable }

// ackedScript is a script whose writes are waited for, with what sending it by hand needs.
type ackedScript struct {
	src, sha string
}

func newAckedScript(src string) ackedScript {
	sum := sha1.Sum([]byte(src))
	return ackedScript{src: src, sha: hex.EncodeToString(sum[:])}
}

// execAcked runs script a, then WAIT for s.acks replicas, on one connection. It returns the
// script's reply, and a *notAckedError alongside it when the replicas fell short, so that the
// caller can undo what the reply says was granted.
func (s *Service) execAcked(ctx context.Context, a ackedScript, keys, args []string) ([]rueidis.RedisMessage, error) {
	ctx = context.WithoutCancel(ctx)
	c := s.client
	wait := func() rueidis.Completed {
		return c.B().Wait().Numreplicas(s.acks).Timeout(s.ackTimeout.Milliseconds()).Build()
	}
	res := c.DoMulti(ctx, c.B().Evalsha().Sha1(a.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
	if rerr, ok := rueidis.IsRedisErr(res[0].Error()); ok && rerr.IsNoScript() {
		res = c.DoMulti(ctx, c.B().Eval().Script(a.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
	}
	if err := res[0].Error(); err != nil {
		return nil, s.classify(err)
	}
	reply, err := res[0].ToArray()
	if err != nil {
		return nil, s.classify(err)
	}
	got, err := res[1].AsInt64()
	if err != nil {
		return reply, &notAckedError{got: 0, want: s.acks} // outcome unknown: treat as not acknowledged
	}
	if got < s.acks {
		return reply, &notAckedError{got: got, want: s.acks}
	}
	return reply, nil
}
