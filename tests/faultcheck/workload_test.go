package faultcheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// The fault checker's clients: what each does with its leases, as the history records it. An
// election (a name with electionPrefix, on every deployment that offers elections) is one more
// lock to them: a campaign is an acquire with a value, a proclaim takes a re-entry's place, a
// resignation a release's; the history checks its leaders as it checks a lock's holders.

// electionPrefix marks an election among the checked names; path is a name's route.
const electionPrefix = "election:"

func isElection(name string) bool { return strings.HasPrefix(name, electionPrefix) }

// hashTag is the hash tag of a checked name's keys: an election's keys are tagged with its name.
func hashTag(name string) string { return strings.TrimPrefix(name, electionPrefix) }

func path(name string) string {
	if rest, ok := strings.CutPrefix(name, electionPrefix); ok {
		return "/elections/" + rest
	}
	return "/locks/" + name
}

// worker is one client: over and over it waits for a lock (or abandons the wait), works under it
// (writing to the fenced store), renews, re-enters, and releases, or lets a lease run out.
func (fc *faultCheck) worker(i int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		lock := fc.locks[rng.IntN(len(fc.locks))]
		owner := fmt.Sprintf("c%02d-%d", i, k)
		ttl, watchdog := leaseTTL, rng.IntN(5) == 0
		if watchdog {
			ttl = watchdogTTL
		}
		ctx, cancel := context.WithCancel(context.Background())
		if rng.IntN(8) == 0 { // abandoned
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(50+rng.IntN(800))*time.Millisecond)
		}
		body := fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d}`, owner, ttl.Milliseconds(), waitFor.Milliseconds())
		if watchdog { // bounded, so that a lease whose release never got through is freed soon
			body = fmt.Sprintf(`{"owner":%q,"ttl_ms":%d,"wait_ms":%d,"watchdog":true,"max_hold_ms":%d}`,
				owner, ttl.Milliseconds(), waitFor.Milliseconds(), maxHold.Milliseconds())
		}
		if isElection(lock) { // a campaign: the same, with the value the leader announces
			body = strings.Replace(body, "{", fmt.Sprintf(`{"value":%q,`, owner+":1"), 1)
		}
		c := fc.client(rng)
		sent := time.Now()
		r, err := fc.send(ctx, c, http.MethodPost, path(lock), nil, body)
		answered := time.Now()
		cancel()
		if err != nil {
			// Granted just as the client gave up, or as its replica went away: the lease holds
			// the lock, unknown to anyone, until its TTL (a watchdog lease: its max hold).
			unknownFor := ttl
			if watchdog {
				unknownFor = maxHold
			}
			fc.h.unknownHold(lock, answered, answered.Add(unknownFor))
			if ctx.Err() == nil { // a replica going away: do not spin on it
				pause := time.NewTimer(20 * time.Millisecond)
				<-pause.C // retry back-off
			}
			continue
		}
		w := waitAnswer{lock: lock, owner: owner, sent: sent, answered: answered, wait: waitFor, status: r.Status}
		if r.Status == http.StatusCreated {
			w.expiresAt, _ = time.Parse(time.RFC3339Nano, r.Str("expires_at"))
		}
		fc.h.wait(w)
		if r.Status != http.StatusCreated {
			continue
		}
		l := &held{lock: lock, owner: owner, fence: r.Int("fence"), token: r.Str("token"), sent: sent, answered: answered,
			validUntil: sent.Add(ttl), watchdog: watchdog}
		if watchdog {
			l.maxHoldUntil = sent.Add(maxHold)
		}
		fc.hold(rng, c, l, ttl)
		fc.h.add(l)
	}
}

// hold works under l: a few writes to the fenced store, renewals and maybe a re-entry, then a
// release (or, now and then, nothing: the lease runs out).
func (fc *faultCheck) hold(rng *rand.Rand, c *harness.Client, l *held, ttl time.Duration) {
	ctx := context.Background()
	holds := 1
	for step := range 1 + rng.IntN(4) {
		if !l.valid(time.Now()) {
			break // the client stops work before its lease can lapse
		}
		fc.h.write(l, time.Now())
		switch rng.IntN(4) {
		case 0:
			t0 := time.Now()
			r, err := fc.send(ctx, c, http.MethodPost, path(l.lock)+"/renew", testkit.TokenHeader(l.token), "")
			switch {
			case err == nil && r.Status == http.StatusOK:
				l.validUntil = t0.Add(ttl)
			case err == nil && r.Status == http.StatusGone:
				l.lost(time.Now(), "renew 410")
				return
			}
		case 1:
			if isElection(l.lock) { // a leader proclaims a new value instead of re-entering
				r, err := fc.send(ctx, c, http.MethodPut, path(l.lock), testkit.TokenHeader(l.token),
					fmt.Sprintf(`{"value":"%s:%d"}`, l.owner, step+2))
				if err == nil && r.Status == http.StatusGone {
					l.lost(time.Now(), "proclaim 410")
					return
				}
			} else if step == 0 {
				t0 := time.Now()
				body := fmt.Sprintf(`{"owner":%q,"ttl_ms":%d}`, l.owner, ttl.Milliseconds())
				r, err := fc.send(ctx, c, http.MethodPost, "/locks/"+l.lock, harness.Headers{"Lease-Token": l.token, "Idempotency-Key": l.owner + "-re"}, body)
				switch {
				case err == nil && r.Status == http.StatusOK:
					holds++
					l.validUntil = t0.Add(ttl)
				case err == nil && r.Status == http.StatusGone:
					l.lost(time.Now(), "re-entry 410")
					return
				}
			}
		}
		pause := time.NewTimer(time.Duration(rng.IntN(150)) * time.Millisecond)
		<-pause.C // the work's duration
	}
	if rng.IntN(10) == 0 && !l.watchdog {
		l.released = l.validUntil // abandoned: it runs out
		return
	}
	for h := range holds {
		l.releaseSent = time.Now()
		// A release is retried with its Idempotency-Key (on any replica) while the answer is lost
		// or 503, as the SDKs do, for a few seconds.
		headers := harness.Headers{"Lease-Token": l.token, "Idempotency-Key": fmt.Sprintf("%s-rel-%d", l.owner, h)}
		r, err := fc.send(ctx, c, http.MethodDelete, path(l.lock), headers, "")
		for try := 0; try < 20 && (err != nil || r.Status == http.StatusServiceUnavailable); try++ {
			pause := time.NewTimer(250 * time.Millisecond)
			<-pause.C // retry back-off
			r, err = fc.send(ctx, fc.client(rng), http.MethodDelete, path(l.lock), headers, "")
		}
		switch {
		case err == nil && r.Status == http.StatusGone:
			l.lost(time.Now(), "release 410")
			return
		case err != nil || r.Status != http.StatusOK:
			// Its client stopped believing it holds when it sent the release; whether Redis still
			// holds it until it could lapse is unknown (see history.unanswered).
			l.released, l.unanswered = l.releaseSent, true
			fc.h.unknownHold(l.lock, l.releaseSent, l.end())
			if l.watchdog {
				l.unknown = true
			}
			return
		}
	}
	l.released, l.confirmed = l.releaseSent, true
}
