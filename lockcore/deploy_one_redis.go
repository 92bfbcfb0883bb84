package lockcore

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// oneRedis is the deployment of a single Redis, standalone or behind Sentinel (rueidis follows
// the failovers): one copy of every lock, one grants channel per gateway replica. With replica
// acks on, every script that grants is followed by WAIT (replica_acks.go).
type oneRedis struct {
	client     rueidis.Client
	runner     runner
	acks       *replicaAcks  // nil unless grants wait for replicas
	chanPrefix string        // + replica ID = a replica's grants channel
	fenceKey   string        // the fence floor of every lock (see deployment.fences)
	subscribed chan struct{} // closed once this process's subscription is first confirmed
}

func (d *oneRedis) run(ctx context.Context, c call) ([]rueidis.RedisMessage, error) {
	if d.acks != nil && c.script.grants {
		return d.acks.exec(ctx, c.script, c.keys, c.args)
	}
	res := d.runner.run(context.WithoutCancel(ctx), d.client, c.script, c.keys, c.args)
	if err := res.Error(); err != nil {
		return nil, classify(err)
	}
	return res.ToArray()
}

func (d *oneRedis) each(ctx context.Context, c call, _ time.Duration, act func(int, []rueidis.RedisMessage, error)) {
	reply, err := d.run(ctx, c)
	act(0, reply, err)
}

func (d *oneRedis) copies() []rueidis.Client { return []rueidis.Client{d.client} }
func (d *oneRedis) live() []rueidis.Client   { return d.copies() }

func (d *oneRedis) masters(context.Context) ([]rueidis.Client, error) { return d.copies(), nil }

func (d *oneRedis) handOffs() int                            { return 1 }
func (d *oneRedis) handsOver() bool                          { return d.acks == nil }
func (d *oneRedis) validity(ttl time.Duration) time.Duration { return ttl }
func (d *oneRedis) clock() string                            { return "" }
func (d *oneRedis) offers(feature) error                     { return nil }
func (d *oneRedis) grants(string) string                     { return d.chanPrefix }
func (d *oneRedis) slot(string) int                          { return 0 }
func (d *oneRedis) fences(string) string                     { return d.fenceKey }
func (d *oneRedis) shards() int                              { return 1 }

// listen follows this process's one grants channel, which serves every lock.
func (d *oneRedis) listen(l listener) {
	l.follow(feed{client: d.client, channel: d.chanPrefix + l.replicaID()}, func(first bool) {
		if first {
			close(d.subscribed)
		}
	})
}

func (d *oneRedis) releaseFeed(string) (feed, bool) { return feed{}, false }

// ready: messages about any lock reach this process once its subscription is first confirmed
// (after a start while Redis is down, that is when Redis comes back).
func (d *oneRedis) ready(listener, string) <-chan struct{} { return d.subscribed }

func (d *oneRedis) ping(ctx context.Context) error {
	return classify(d.client.Do(ctx, d.client.B().Ping().Build()).Error())
}

func (d *oneRedis) close() {}
