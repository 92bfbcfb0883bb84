package testkit

import (
	"context"
	"net/http"
	"testing"

	"github.com/leasegate/leasegate/internal/harness"
)

// Pair is two gateway replicas on one Redis, sharing key prefix and token secret.
type Pair struct {
	*Env
	Gateway2 *harness.Gateway
	Client2  *harness.Client
}

// NewPair gives t an Env and a second gateway on its Redis (same key prefix), with a client.
func NewPair(t *testing.T) *Pair {
	t.Helper()
	e := NewEnv(t, nil)
	gw2 := harness.NewGateway(t, e.GatewayOptions(e.Gateway.KeyPrefix, nil))
	return &Pair{Env: e, Gateway2: gw2, Client2: harness.NewClient(t, gw2.URL)}
}

// Replica returns the client of replica i%2.
func (p *Pair) Replica(i int) *harness.Client {
	if i%2 == 0 {
		return p.Client
	}
	return p.Client2
}

// StartWaiter long-polls in a goroutine; the response arrives on the returned channel.
func StartWaiter(c *harness.Client, ctx context.Context, lock, owner string, ttlMs, waitMs int64) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	go func() {
		out <- c.DoContext(ctx, http.MethodPost, "/locks/"+lock, nil, WaitBody(owner, ttlMs, waitMs))
	}()
	return out
}

// StartWaiterBody posts the acquire body for lock in a goroutine; the response arrives on the
// returned channel.
func StartWaiterBody(c *harness.Client, lock, body string) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	go func() { out <- c.Do(http.MethodPost, "/locks/"+lock, nil, body) }()
	return out
}
