package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// target is what a command takes, gives back, renews or inspects: a lock (an exclusive or a
// shared hold), several locks at once (a multi-lock: taken by its members' names, renewed and
// given back by its id), one permit of a semaphore, or an election's lead. run holds it through the SDK (hold); the
// one-shot commands, which print the gateway's answer as it is, make one call each through one
// gateway (acquire, renew, release, inspect), which returns the answer whatever its status, and a
// transport error as its error.
type target struct {
	// Exactly one is set: lock; locks, a multi-lock's 2-64 members (run, acquire); multilock, a
	// multi-lock's id (renew, release); semaphore.
	lock      string
	locks     []string
	multilock string
	semaphore string
	// mode is the hold of a lock (or of every member) to take (run, acquire) or to give back
	// (release, where "" lets the gateway choose). Semaphores have none.
	mode    leasegate.Mode
	permits int64 // the semaphore's size (run, acquire)
	// election is the election elect campaigns in, or inspect reads (and nothing else is set),
	// with the value elect announces and whether the gateway renews the lead too (--watchdog).
	election string
	value    string
	watchdog bool
}

// String names the target for messages: `lock "a"`, `shared lock "a"`, `multi-lock ["a" "b"]`,
// `multi-lock "m-…"`, `semaphore "s"`.
func (t target) String() string {
	shared := ""
	if t.mode == leasegate.ModeShared {
		shared = "shared "
	}
	switch {
	case t.election != "":
		return fmt.Sprintf("election %q", t.election)
	case t.semaphore != "":
		return fmt.Sprintf("semaphore %q", t.semaphore)
	case t.multilock != "":
		return fmt.Sprintf("multi-lock %q", t.multilock)
	case t.locks != nil:
		return fmt.Sprintf("%smulti-lock %q", shared, t.locks)
	}
	return fmt.Sprintf("%slock %q", shared, t.lock)
}

// keyed reports whether t's calls carry an Idempotency-Key; multi-lock calls take none.
func (t target) keyed() bool { return t.locks == nil && t.multilock == "" }

// heldLease is a hold run keeps alive, watches and gives back: a lock's or a permit's
// *leasegate.Lease, a multi-lock's *leasegate.MultiLease, or (elect) an election's *leasegate.Lead.
type heldLease interface {
	RenewVia(ctx context.Context, gw *leasegate.Gateway, ttl time.Duration) error
	ReleaseVia(ctx context.Context, gw *leasegate.Gateway) (released bool, err error)
	ValidUntil() time.Time
	Watch(via ...*leasegate.Gateway)
	Done() <-chan struct{}
	Err() error
}

// hold takes t through gw for run and elect, waiting up to wait, with the SDK's Lock, LockAll,
// AcquireSemaphore or Campaign (which split a long wait into long-polls, and retry a 503 within
// it; a lock's, a permit's and a candidate's keep their place in line). key is the
// Idempotency-Key of the acquire, whichever replica answers; a multi-lock's acquire has none.
func (t target) hold(ctx context.Context, gw *leasegate.Gateway, owner string, ttl, wait time.Duration, key string) (heldLease, error) {
	var (
		lease heldLease
		err   error
	)
	// Each branch assigns a non-nil lease only with a nil err: a nil *Lease in heldLease is not nil.
	switch {
	case t.election != "":
		var l *leasegate.Lead
		if l, err = gw.Campaign(ctx, t.election, t.value, leasegate.CampaignOptions{Owner: owner, TTL: ttl, Wait: wait, Watchdog: t.watchdog, IdempotencyKey: key}); err == nil {
			lease = l
		}
	case t.semaphore != "":
		var l *leasegate.Lease
		if l, err = gw.AcquireSemaphore(ctx, t.semaphore, leasegate.SemaphoreOptions{Owner: owner, Permits: t.permits, TTL: ttl, Wait: wait, IdempotencyKey: key}); err == nil {
			lease = l
		}
	case t.locks != nil:
		var m *leasegate.MultiLease
		if m, err = gw.LockAll(ctx, t.locks, leasegate.MultiLockOptions{Owner: owner, Mode: t.mode, TTL: ttl, Wait: wait}); err == nil {
			lease = m
		}
	default:
		var l *leasegate.Lease
		if l, err = gw.Lock(ctx, t.lock, leasegate.LockOptions{Owner: owner, Mode: t.mode, TTL: ttl, Wait: wait, IdempotencyKey: key}); err == nil {
			lease = l
		}
	}
	return lease, err
}

// answer is the gateway's answer to one call.
type answer struct {
	status  int
	body    []byte
	problem *leasegate.ProblemError // a problem+json answer
}

func newAnswer(resp *http.Response, body []byte) *answer {
	a := &answer{status: resp.StatusCode, body: body}
	if a.status >= 300 {
		p := &leasegate.ProblemError{}
		if err := json.Unmarshal(body, &p.Problem); err == nil && p.Type != "" {
			a.problem = p
		}
	}
	return a
}

// err is the answer's problem as an error (an *unexpectedAnswer when it is no problem+json), or
// nil for a 2xx answer.
func (a *answer) err() error {
	switch {
	case a.status < 300:
		return nil
	case a.problem != nil:
		return a.problem
	}
	return &unexpectedAnswer{status: a.status, body: string(bytes.TrimSpace(a.body))}
}

// unexpectedAnswer is a non-2xx answer without a problem+json body (a proxy's, say).
type unexpectedAnswer struct {
	status int
	body   string
}

func (e *unexpectedAnswer) Error() string {
	return fmt.Sprintf("unexpected answer %d %s: %.200s", e.status, http.StatusText(e.status), e.body)
}

// refusal reports whether err is an answer that asking again will not change: a 4xx other than
// 408 and 429 (a bad name, no key or a wrong one, no permission, no such route) or a 501.
func refusal(err error) bool {
	var (
		p *leasegate.ProblemError
		u *unexpectedAnswer
	)
	status := 0
	switch {
	case errors.As(err, &p):
		status = int(p.Status)
	case errors.As(err, &u):
		status = u.status
	}
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500 || status == http.StatusNotImplemented
}

// notAcquired reports whether err says that the lock stayed held, or every permit taken.
func notAcquired(err error) bool {
	return errors.Is(err, leasegate.ErrHeld) || errors.Is(err, leasegate.ErrSemaphoreFull) || errors.Is(err, leasegate.ErrLed)
}

// acquireOptions are one acquire request's fields.
type acquireOptions struct {
	owner              string
	ttl, wait, maxHold time.Duration // wait: this request's long-poll
	watchdog           bool
	token              string  // re-enter this token's lease
	ticket             *string // keep the place in line of an earlier wait
	key                string  // Idempotency-Key
}

func (t target) acquire(ctx context.Context, gw *leasegate.Gateway, o acquireOptions) (*answer, error) {
	var token, watchdog = optional(o.token), optional(o.watchdog)
	switch {
	case t.locks != nil: // no re-entry, no Idempotency-Key
		resp, err := gw.API.AcquireMultiLockWithResponse(ctx, leasegate.MultiLockRequest{Owner: o.owner, Locks: t.locks,
			Mode: optional(t.mode), TtlMs: ms(o.ttl), WaitMs: ms(o.wait), Watchdog: watchdog, MaxHoldMs: ms(o.maxHold),
			QueueTicket: o.ticket})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	case t.semaphore != "":
		resp, err := gw.API.AcquireSemaphoreWithResponse(ctx, t.semaphore,
			&leasegate.AcquireSemaphoreParams{LeaseToken: token, IdempotencyKey: &o.key},
			leasegate.SemaphoreAcquireRequest{Owner: o.owner, Permits: t.permits, TtlMs: ms(o.ttl), WaitMs: ms(o.wait),
				Watchdog: watchdog, MaxHoldMs: ms(o.maxHold), QueueTicket: o.ticket})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	}
	resp, err := gw.API.AcquireLockWithResponse(ctx, t.lock,
		&leasegate.AcquireLockParams{LeaseToken: token, IdempotencyKey: &o.key},
		leasegate.AcquireRequest{Owner: o.owner, Mode: optional(t.mode), TtlMs: ms(o.ttl), WaitMs: ms(o.wait),
			Watchdog: watchdog, MaxHoldMs: ms(o.maxHold), QueueTicket: o.ticket})
	if err != nil {
		return nil, err
	}
	return newAnswer(resp.HTTPResponse, resp.Body), nil
}

func (t target) renew(ctx context.Context, gw *leasegate.Gateway, token string, ttl time.Duration, key string) (*answer, error) {
	switch {
	case t.multilock != "":
		resp, err := gw.API.RenewMultiLockByIdWithResponse(ctx, t.multilock,
			&leasegate.RenewMultiLockByIdParams{LeaseToken: token}, leasegate.RenewRequest{TtlMs: ms(ttl)})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	case t.semaphore != "":
		resp, err := gw.API.RenewSemaphoreWithResponse(ctx, t.semaphore,
			&leasegate.RenewSemaphoreParams{LeaseToken: token, IdempotencyKey: &key}, leasegate.RenewRequest{TtlMs: ms(ttl)})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	}
	resp, err := gw.API.RenewLockWithResponse(ctx, t.lock,
		&leasegate.RenewLockParams{LeaseToken: token, IdempotencyKey: &key}, leasegate.RenewRequest{TtlMs: ms(ttl)})
	if err != nil {
		return nil, err
	}
	return newAnswer(resp.HTTPResponse, resp.Body), nil
}

// release gives back one hold of the token's lease (for a lock, of t.mode when set), or every
// member of a multi-lock.
func (t target) release(ctx context.Context, gw *leasegate.Gateway, token, key string) (*answer, error) {
	switch {
	case t.multilock != "":
		resp, err := gw.API.ReleaseMultiLockByIdWithResponse(ctx, t.multilock, &leasegate.ReleaseMultiLockByIdParams{LeaseToken: token})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	case t.semaphore != "":
		resp, err := gw.API.ReleaseSemaphoreWithResponse(ctx, t.semaphore,
			&leasegate.ReleaseSemaphoreParams{LeaseToken: &token, IdempotencyKey: &key})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	}
	params := &leasegate.ReleaseLockParams{LeaseToken: &token, IdempotencyKey: &key}
	if t.mode != "" {
		mode := leasegate.ReleaseLockParamsMode(t.mode)
		params.Mode = &mode
	}
	resp, err := gw.API.ReleaseLockWithResponse(ctx, t.lock, params)
	if err != nil {
		return nil, err
	}
	return newAnswer(resp.HTTPResponse, resp.Body), nil
}

func (t target) inspect(ctx context.Context, gw *leasegate.Gateway, token string) (*answer, error) {
	if t.election != "" {
		resp, err := gw.API.InspectElectionWithResponse(ctx, t.election)
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	}
	if t.semaphore != "" {
		resp, err := gw.API.InspectSemaphoreWithResponse(ctx, t.semaphore, &leasegate.InspectSemaphoreParams{LeaseToken: optional(token)})
		if err != nil {
			return nil, err
		}
		return newAnswer(resp.HTTPResponse, resp.Body), nil
	}
	resp, err := gw.API.InspectLockWithResponse(ctx, t.lock, &leasegate.InspectLockParams{LeaseToken: optional(token)})
	if err != nil {
		return nil, err
	}
	return newAnswer(resp.HTTPResponse, resp.Body), nil
}

// optional is a pointer to v, or nil for v's zero value (a field left out of the request).
func optional[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
