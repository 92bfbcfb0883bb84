package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/lockcore"
)

// throughput measures uncontended acquire+release cycles/s with keep-alive clients on distinct
// names, through the gateway and through the HTTP floor (same router, no Redis), in alternating
// rounds so that both sides see the same machine noise.
func throughput(redis *harness.Redis) error {
	gw, err := startGateway(redis.Addr, harness.RandomPrefix())
	if err != nil {
		return err
	}
	defer gw.Close()
	floor, err := serve(floorLocker{tokens: gw.svc.Tokens()})
	if err != nil {
		return err
	}
	defer floor.Close()
	trip, err := serve(roundTripLocker{floorLocker: floorLocker{tokens: gw.svc.Tokens()}, client: gw.client, script: rueidis.NewLuaScript("return 1")})
	if err != nil {
		return err
	}
	defer trip.Close()

	var gwRates, floorRates, tripRates []float64
	for i := 0; i < *rounds; i++ {
		p0 := processCPU()
		f, err := cycles(floor.URL, *clients, *duration)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		floorProc := (processCPU() - p0) / duration.Seconds()
		cpu0, p0 := redisCPU(redis), processCPU()
		g, err := cycles(gw.URL, *clients, *duration)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		redisShare := (redisCPU(redis) - cpu0) / duration.Seconds()
		gwProc := (processCPU() - p0) / duration.Seconds()
		tr, err := cycles(trip.URL, *clients, *duration)
		if err != nil {
			return fmt.Errorf("round-trip floor: %w", err)
		}
		floorRates, gwRates, tripRates = append(floorRates, f), append(gwRates, g), append(tripRates, tr)
		fmt.Printf("  round %d: floor %.0f cycles/s (bench process %.0f%% CPU); gateway %.0f cycles/s (bench process %.0f%%, redis-server %.0f%%); round-trip floor %.0f cycles/s\n",
			i+1, f, 100*floorProc, g, 100*gwProc, 100*redisShare, tr)
	}
	f, g, tr := median(floorRates), median(gwRates), median(tripRates)
	fmt.Printf("throughput (%d clients, distinct names, %d x %v rounds, medians):\n", *clients, *rounds, *duration)
	fmt.Printf("  HTTP floor (no Redis):  %8.0f acquire+release cycles/s\n", f)
	fmt.Printf("  gateway (real Redis):   %8.0f acquire+release cycles/s\n", g)
	fmt.Printf("  gateway / floor:        %8.1f %%\n", 100*g/f)
	fmt.Printf("  round-trip floor (HTTP floor + one trivial script call per request, same Redis client): %.0f cycles/s = %.1f %% of the floor; gateway / round-trip floor %.1f %%\n",
		tr, 100*tr/f, 100*g/tr)
	return nil
}

// roundTripLocker is the HTTP floor plus one Redis round trip per acquire and release (a script
// that returns 1), through the gateway's Redis client: what two Redis calls per cycle cost before
// any lock logic.
type roundTripLocker struct {
	floorLocker
	client rueidis.Client
	script *rueidis.Lua
}

func (l roundTripLocker) Acquire(ctx context.Context, req lockcore.AcquireRequest) (lockcore.Grant, error) {
	if err := l.script.Exec(ctx, l.client, []string{req.Lock}, nil).Error(); err != nil {
		return lockcore.Grant{}, err
	}
	return l.floorLocker.Acquire(ctx, req)
}

func (l roundTripLocker) Release(ctx context.Context, req lockcore.ReleaseRequest) (lockcore.Released, error) {
	if err := l.script.Exec(ctx, l.client, []string{req.Ref.Name}, nil).Error(); err != nil {
		return lockcore.Released{}, err
	}
	return l.floorLocker.Release(ctx, req)
}

// cycles runs n clients, each acquiring and releasing its own lock name in a loop, for d, and
// returns completed cycles per second. Any unexpected status aborts the run.
func cycles(base string, n int, d time.Duration) (float64, error) {
	body := []byte(`{"owner":"bench","ttl_ms":30000}`)
	return harness.Cycles(n, d, func(i int) (string, []byte, string) {
		name := fmt.Sprintf("%s/locks/bench-%d", base, i)
		return name, body, name
	})
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// floorLocker answers every lock call at once without Redis: the HTTP floor. It mints and parses
// real tokens so that the floor does the same token work as the gateway.
type floorLocker struct{ tokens *lockcore.Tokens }

// Acquire answers at once, except waits, which block until their client leaves.
func (f floorLocker) Acquire(ctx context.Context, req lockcore.AcquireRequest) (lockcore.Grant, error) {
	if req.Wait > 0 {
		<-ctx.Done()
		return lockcore.Grant{}, ctx.Err()
	}
	l := lockcore.Lease{Lock: req.Lock, Owner: req.Owner, ID: "5f0c7d0e-3f8e-4a57-9a3c-2f4e8f9b1c11", Fence: 1}
	return lockcore.Grant{Lease: l, Token: f.tokens.Mint(l), TTL: req.TTL, ExpiresAt: time.Now().Add(req.TTL), Holds: 1}, nil
}

func (f floorLocker) Release(_ context.Context, req lockcore.ReleaseRequest) (lockcore.Released, error) {
	if _, err := f.tokens.Parse(req.Token, req.Ref); err != nil {
		return lockcore.Released{}, err
	}
	return lockcore.Released{Released: true}, nil
}

func (f floorLocker) Renew(context.Context, lockcore.Ref, string, time.Duration) (lockcore.Grant, error) {
	return lockcore.Grant{}, nil
}

func (f floorLocker) Inspect(_ context.Context, ref lockcore.Ref, _ string) (lockcore.State, error) {
	return lockcore.State{Ref: ref}, nil
}

func (f floorLocker) Ping(context.Context) error { return nil }

// The floors take no multi-locks.
func (floorLocker) AcquireAll(context.Context, lockcore.MultiRequest) (lockcore.MultiGrant, error) {
	return lockcore.MultiGrant{}, errors.ErrUnsupported
}
func (floorLocker) ReleaseAll(context.Context, string, string) (lockcore.MultiReleased, error) {
	return lockcore.MultiReleased{}, errors.ErrUnsupported
}
func (floorLocker) RenewAll(context.Context, string, string, time.Duration) (lockcore.MultiGrant, error) {
	return lockcore.MultiGrant{}, errors.ErrUnsupported
}
func (floorLocker) ForceRelease(context.Context, lockcore.Ref) (lockcore.ForceResult, error) {
	return lockcore.ForceResult{}, errors.ErrUnsupported
}
func (floorLocker) Watch(context.Context, lockcore.Ref, string) (*lockcore.Stream, error) {
	return nil, errors.ErrUnsupported
}

// redisCPU returns the CPU seconds redis-server has used so far (user + system).
func redisCPU(r *harness.Redis) float64 {
	info, err := r.Do("INFO", "cpu")
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// processCPU returns the CPU seconds this process (clients and server) has used so far.
func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
