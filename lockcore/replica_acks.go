package lockcore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Replica-acknowledged grants (Options.ReplicaAcks): every script that grants or extends a hold
// (acquire, re-entry, renewal and a waiter's confirmation, a multi-lock's acquire and renewal) is
// followed by WAIT on the same connection, and a grant that fewer replicas acknowledge in time is
// undone and answered ErrUnavailable. Releases, dequeues and heartbeats are not waited for: losing
// one leaves a hold in place until it runs out, never lets a second holder in; nor are the
// watchdog's renewals, which come every third of a TTL and are carried on by the new master.
//
// What a failover keeps depends on how many replicas are asked for (docs/deployments.md,
// "What a failover keeps"): WAIT does not make Redis strongly consistent. A grant on fewer than every
// replica can be lost when the replica promoted is one that did not have it, or when the old
// master, still writable after the promotion, is acknowledged by a replica that is then resynced
// from the new master. A grant on every replica (Options.CountReplicas) is on whichever replica
// is promoted, and an old master that lost one of its replicas to the promotion cannot gather
// every acknowledgement any more.
//
// WAIT counts only the writes of the connection it is sent on, so the script and WAIT go on one
// dedicated connection, in order. Not through the client's DoMulti: on a Cluster its redirect
// handling panics during slot migrations (see ../shared/NOTES-dependencies.md); a dedicated
// connection follows no redirect by itself, so MOVED, ASK and TRYAGAIN are followed here, for
// up to redirectBudget.

// notAckedError: fewer replicas than asked acknowledged a write in time. It matches ErrUnavailable.
type notAckedError struct{ got, want int64 }

func (e *notAckedError) Error() string {
	return fmt.Sprintf("%s: %d of %d replicas acknowledged the grant in time", ErrUnavailable, e.got, e.want)
}

func (e *notAckedError) Unwrap() error { return ErrUnavailable }

// redirectBudget bounds how long an acknowledged call follows a Cluster slot's migration or
// failover (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) before it answers ErrUnavailable.
const redirectBudget = 2 * time.Second

// redirectPause is the pause before trying again after TRYAGAIN or CLUSTERDOWN, or a redirection
// to a node the client does not know yet.
const redirectPause = 25 * time.Millisecond

// replicaRecount is how often the number of replicas is read again when every replica must
// acknowledge (Options.CountReplicas), and replicaRecountRetry how soon after a failed count.
const (
	replicaRecount      = 5 * time.Second
	replicaRecountRetry = time.Second
)

// replicaAcks waits for replicas after each grant.
type replicaAcks struct {
	client  rueidis.Client
	timeout time.Duration
	// fixed is the number of replicas asked for; 0 when it is every replica the deployment knows,
	// counted by count into counted (0 until the first count succeeds: grants answer
	// ErrUnavailable until then).
	fixed   int64
	count   func(context.Context) (int, error)
	counted atomic.Int64
	log     *slog.Logger
}

// want is how many replicas must acknowledge a grant now.
func (a *replicaAcks) want() (int64, error) {
	if a.fixed > 0 {
		return a.fixed, nil
	}
	if n := a.counted.Load(); n > 0 {
		return n, nil
	}
	return 0, fmt.Errorf("%w: the number of replicas to acknowledge grants is not known yet", ErrUnavailable)
}

// recount keeps counted up to date until ctx ends. A deployment without a replica counts as one
// replica: its grants wait until one is there.
func (a *replicaAcks) recount(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		n, err := a.count(cctx)
		cancel()
		if err != nil {
			a.log.Warn("counting the replicas that must acknowledge grants failed; the last count stays", "err", err)
			t.Reset(replicaRecountRetry)
			continue
		}
		if old := a.counted.Swap(int64(max(n, 1))); old != int64(max(n, 1)) {
			a.log.Info("replicas that acknowledge each grant", "replicas", max(n, 1), "deployment_replicas", n)
		}
		t.Reset(replicaRecount)
	}
}

// exec runs script sc, then WAIT, on one connection. It returns the script's reply, and a
// *notAckedError alongside it when the replicas fell short, so that the caller can undo what the
// reply says was granted.
func (a *replicaAcks) exec(ctx context.Context, sc *script, keys, args []string) ([]rueidis.RedisMessage, error) {
	want, err := a.want()
	if err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	giveUp := time.Now().Add(redirectBudget)
	node, asking := "", false // where a redirection sent the call ("": where the client routes it)
	for {
		res, err := a.once(ctx, node, asking, sc, keys, args, want)
		if err == nil {
			err = res[0].Error()
		}
		if time.Now().Before(giveUp) {
			if next, ask, again := redirection(err); again {
				node, asking = next, ask
				if next == "" {
					pauseFor(redirectPause)
				}
				continue
			}
		}
		if err != nil {
			return nil, classify(err)
		}
		reply, err := res[0].ToArray()
		if err != nil {
			return nil, classify(err)
		}
		got, err := res[1].AsInt64()
		if err != nil || got < want { // an error: outcome unknown, so not acknowledged
			return reply, &notAckedError{got: max(got, 0), want: want}
		}
		return reply, nil
	}
}

// errUnknownNode: a redirection named a node the client has no connection to yet.
var errUnknownNode = errors.New("redirected to a node the client does not know yet")

// once sends sc and WAIT on one dedicated connection: to node when a redirection named one
// (preceded by ASKING after an ASK), else where the client routes the keys. NOSCRIPT is answered
// by sending the script's source on the same connection.
func (a *replicaAcks) once(ctx context.Context, node string, asking bool, sc *script, keys, args []string, want int64) ([]rueidis.RedisResult, error) {
	c := a.client
	if node != "" {
		n, ok := c.Nodes()[node]
		if !ok {
			return nil, errUnknownNode
		}
		c = n
	}
	var res []rueidis.RedisResult
	err := c.Dedicated(func(dc rueidis.DedicatedClient) error {
		send := func(script rueidis.Completed) []rueidis.RedisResult {
			cmds := make(rueidis.Commands, 0, 3)
			if asking {
				cmds = append(cmds, dc.B().Asking().Build())
			}
			cmds = append(cmds, script, dc.B().Wait().Numreplicas(want).Timeout(a.timeout.Milliseconds()).Build())
			r := dc.DoMulti(ctx, cmds...)
			return r[len(r)-2:]
		}
		res = send(dc.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		if rerr, ok := rueidis.IsRedisErr(res[0].Error()); ok && rerr.IsNoScript() {
			res = send(dc.B().Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		}
		return nil
	})
	return res, err
}

// redirection reads err as a Cluster redirection: again when the call is to be sent again, to
// node (after ASKING when ask) or, when node is "", where the client routes it after a pause.
func redirection(err error) (node string, ask, again bool) {
	if errors.Is(err, errUnknownNode) {
		return "", false, true
	}
	rerr, ok := rueidis.IsRedisErr(err)
	if !ok {
		return "", false, false
	}
	if addr, ok := rerr.IsMoved(); ok {
		return addr, false, true
	}
	if addr, ok := rerr.IsAsk(); ok {
		return addr, true, true
	}
	if rerr.IsTryAgain() || rerr.IsClusterDown() {
		return "", false, true
	}
	return "", false, false
}

// pauseFor waits d: a retry's back-off, on a call detached from its caller's cancellation.
func pauseFor(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}
