package redisson

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Taking a lock, and waiting for it as RedissonLock.java's lock() and tryLock(waitTime,
// leaseTime, unit) do: one try; on failure subscribe to the lock's channel, then try again, and
// between tries block on the channel's latch until a release message or the holder's TTL (the
// try's PTTL reply), whichever comes first; unsubscribe at the end.

// TryLock tries to take the lock for up to wait (RedissonLock.tryLock(waitTime, leaseTime)). A
// lease > 0 is the hold's lease; otherwise (by convention -1) the hold lasts
// Options.WatchdogTimeout and the watchdog renews it every third of that until Unlock. A wait <= 0
// tries once. It reports whether it took the lock; it fails with ctx's error, ErrClosed, or a
// Redis error (after which the outcome of the last try is unknown).
func (l *Lock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	acquired, _, err := l.tryAcquire(ctx, lease)
	if err != nil || acquired {
		return acquired, err
	}
	if time.Until(deadline) <= 0 {
		return false, nil
	}
	sctx, cancel := context.WithDeadline(ctx, deadline)
	e, err := l.c.subs.subscribe(sctx, l.proto.channel(l.name))
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return false, nil // not subscribed within the wait: Java gives up too
		}
		return false, err
	}
	defer l.c.subs.unsubscribe(e)
	for {
		if time.Until(deadline) <= 0 {
			return false, nil
		}
		acquired, pttl, err := l.tryAcquire(ctx, lease)
		if err != nil || acquired {
			return acquired, err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return false, nil
		}
		if held := time.Duration(pttl) * time.Millisecond; pttl >= 0 && held < remaining {
			remaining = held
		}
		if err := e.await(ctx, l.c.closing(), remaining); err != nil {
			return false, err
		}
	}
}

// Lock takes the lock, waiting as long as it takes (RedissonLock.lock()); the hold is on the
// watchdog until Unlock. It fails with ctx's error, ErrClosed, ErrSubscriptionTimeout, or a
// Redis error (after which the outcome of the last try is unknown).
func (l *Lock) Lock(ctx context.Context) error {
	acquired, _, err := l.tryAcquire(ctx, -1)
	if err != nil || acquired {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, l.c.opts.SubscriptionTimeout)
	e, err := l.c.subs.subscribe(sctx, l.proto.channel(l.name))
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w after %v: %s", ErrSubscriptionTimeout, l.c.opts.SubscriptionTimeout, l.proto.channel(l.name))
		}
		return err
	}
	defer l.c.subs.unsubscribe(e)
	for {
		acquired, pttl, err := l.tryAcquire(ctx, -1)
		if err != nil || acquired {
			return err
		}
		wait := time.Duration(-1) // no expiry on the holder: until a message
		if pttl >= 0 {
			wait = time.Duration(pttl) * time.Millisecond
		}
		if err := e.await(ctx, l.c.closing(), wait); err != nil {
			return err
		}
	}
}

// tryAcquire is RedissonLock.tryAcquireAsync: one try with lease when lease > 0 (which then
// becomes the lock object's lease, internalLockLeaseTime), else with the current lease and, on
// success, the hold put on the watchdog. It returns the holder's PTTL when the try failed.
func (l *Lock) tryAcquire(ctx context.Context, lease time.Duration) (bool, int64, error) {
	try := lease
	if lease <= 0 {
		try = l.currentLease()
	}
	acquired, pttl, err := l.proto.tryLock(ctx, l, try)
	if err != nil {
		return false, 0, fmt.Errorf("try lock %q: %w", l.name, err)
	}
	if acquired {
		if lease > 0 {
			l.setLease(lease)
		} else {
			l.proto.scheduleRenewal(l)
		}
	}
	return acquired, pttl, nil
}
