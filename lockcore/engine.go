package lockcore

import (
	"context"
	"log/slog"
	"sync"

	"github.com/redis/rueidis"
)

// engine is what every part of the Service shares: where the locks live, how their keys and
// calls are made, whom to tell, and the Service's lifetime. The Service embeds it; its components
// (waiters, watchdog, ledgers, event hub) hold a pointer to it and nothing more of the Service.
type engine struct {
	dep   deployment
	space lockSpace
	log   *slog.Logger
	obs   Observer
	ctx   context.Context // ends at Close
	wg    sync.WaitGroup  // every goroutine the Service started
}

// keys are the Redis keys of r, with the fence floor its deployment keeps for it.
func (e *engine) keys(r Ref) keys {
	k := e.space.keys(r)
	k.fence = e.dep.fences(k.lock)
	return k
}

// do runs sc once on the deployment's first copy of the locks, for what only a deployment of one
// copy offers (see deployment.offers): its reply as it is.
func (e *engine) do(ctx context.Context, sc *script, keys, args []string) rueidis.RedisResult {
	return runner{obs: e.obs}.run(ctx, e.dep.copies()[0], sc, keys, args)
}

// offered returns the deployment's ErrNotSupported for a kind of lock it lacks (semaphores,
// elections).
func (e *engine) offered(ref Ref) error {
	switch ref.Kind {
	case KindSemaphore:
		return e.dep.offers(featureSemaphores)
	case KindElection:
		return e.dep.offers(featureElections)
	}
	return nil
}
