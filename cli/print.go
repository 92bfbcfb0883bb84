package cli

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// acquire, release, renew and inspect print the gateway's JSON answer (a grant, a release, a
// lock state, or a problem) and exit 0 on success.

func (c *command) acquire(ctx context.Context, args []string) int {
	f := c.flags("acquire", "--lock NAME [--owner O] [--ttl D] [--wait D] [--watchdog] [--max-hold D] [--token T]")
	owner := f.fs.String("owner", c.defaultOwner(), "who holds the lock")
	ttl := durationFlag(f.fs, "ttl", 30*time.Second, "lease time to live")
	wait := durationFlag(f.fs, "wait", 0, "how long to wait for a held lock (long-polls of at most 30s, keeping the place in line)")
	watchdog := f.fs.Bool("watchdog", false, "let the gateway renew the lease until released")
	maxHold := durationFlag(f.fs, "max-hold", 0, "watchdog: stop renewing this long after the grant")
	token := f.fs.String("token", "", "re-enter the lease of this token")
	gw, code := c.parse(f, args)
	if gw == nil {
		return code
	}
	body := leasegate.AcquireRequest{Owner: *owner, TtlMs: ms(*ttl), WaitMs: ms(*wait), MaxHoldMs: ms(*maxHold)}
	if *watchdog {
		body.Watchdog = watchdog
	}
	key := uuid.NewString() // one logical acquire, however many long-polls and retries
	params := &leasegate.AcquireLockParams{IdempotencyKey: &key}
	if *token != "" {
		params.LeaseToken = token
	}
	deadline := time.Now().Add(*wait)
	for {
		if *wait > 0 {
			body.WaitMs = ms(max(min(time.Until(deadline), maxWaitPerRequest), time.Millisecond))
		}
		var resp *leasegate.AcquireLockResponse
		err := c.call(ctx, func(gw *leasegate.Gateway) (int, error) {
			var err error
			resp, err = gw.API.AcquireLockWithResponse(ctx, *f.lock, params, body)
			return status(resp, err), err
		})
		if err != nil {
			return c.fail(err)
		}
		// A wait longer than one long-poll goes on with the next, at the same place in line; a
		// replica that is shutting down (or full) is retried within the wait.
		if *wait > 0 && *token == "" && time.Until(deadline) > 0 {
			if p := resp.ApplicationproblemJSON409; p != nil && p.QueueTicket != nil {
				body.QueueTicket = p.QueueTicket
				continue
			}
			if p := resp.ApplicationproblemJSON503; p != nil {
				if p.QueueTicket != nil {
					body.QueueTicket = p.QueueTicket
				}
				select {
				case <-ctx.Done():
					return c.fail(ctx.Err())
				case <-time.After(min(time.Second, time.Until(deadline))):
				}
				continue
			}
		}
		return c.print(resp.HTTPResponse, resp.Body)
	}
}

// maxWaitPerRequest bounds one long-poll, below the gateway's default LEASEGATE_MAX_WAIT (60s)
// and common HTTP client timeouts.
const maxWaitPerRequest = 30 * time.Second

func (c *command) release(ctx context.Context, args []string) int {
	f := c.flags("release", "--lock NAME --token T")
	token := f.fs.String("token", "", "lease token (required)")
	if gw, code := c.parse(f, args); gw == nil {
		return code
	}
	key := uuid.NewString()
	var resp *leasegate.ReleaseLockResponse
	err := c.call(ctx, func(gw *leasegate.Gateway) (int, error) {
		var err error
		resp, err = gw.API.ReleaseLockWithResponse(ctx, *f.lock, &leasegate.ReleaseLockParams{LeaseToken: *token, IdempotencyKey: &key})
		return status(resp, err), err
	})
	if err != nil {
		return c.fail(err)
	}
	return c.print(resp.HTTPResponse, resp.Body)
}

func (c *command) renew(ctx context.Context, args []string) int {
	f := c.flags("renew", "--lock NAME --token T [--ttl D]")
	token := f.fs.String("token", "", "lease token (required)")
	ttl := durationFlag(f.fs, "ttl", 0, "new time to live (default: the lease's own)")
	if gw, code := c.parse(f, args); gw == nil {
		return code
	}
	key := uuid.NewString()
	var resp *leasegate.RenewLockResponse
	err := c.call(ctx, func(gw *leasegate.Gateway) (int, error) {
		var err error
		resp, err = gw.API.RenewLockWithResponse(ctx, *f.lock, &leasegate.RenewLockParams{LeaseToken: *token, IdempotencyKey: &key},
			leasegate.RenewRequest{TtlMs: ms(*ttl)})
		return status(resp, err), err
	})
	if err != nil {
		return c.fail(err)
	}
	return c.print(resp.HTTPResponse, resp.Body)
}

func (c *command) inspect(ctx context.Context, args []string) int {
	f := c.flags("inspect", "--lock NAME [--token T]")
	token := f.fs.String("token", "", "also tell whether this token's lease holds the lock")
	gw, code := c.parse(f, args)
	if gw == nil {
		return code
	}
	params := &leasegate.InspectLockParams{}
	if *token != "" {
		params.LeaseToken = token
	}
	resp, err := gw.API.InspectLockWithResponse(ctx, *f.lock, params)
	if err != nil {
		return c.fail(err)
	}
	return c.print(resp.HTTPResponse, resp.Body)
}

// call makes one call through the --server replicas, retrying it through the next after a
// transport error (the answer may have been lost) or a 503, up to three tries 50 and 100 ms
// apart. Callers send one Idempotency-Key on all tries, so a retry cannot apply twice. do returns
// the answer's status.
func (c *command) call(ctx context.Context, do func(gw *leasegate.Gateway) (int, error)) error {
	var err error
	for try := range 3 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(try) * 50 * time.Millisecond):
			}
		}
		var code int
		code, err = do(c.gateways[try%len(c.gateways)])
		if err == nil && code != http.StatusServiceUnavailable || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// status is a generated response's status code, 0 when there is none.
func status(resp interface{ StatusCode() int }, err error) int {
	if err != nil {
		return 0
	}
	return resp.StatusCode()
}

// print writes the answer's body; the exit code is 0 for 2xx, ExitNotAcquired for 409, else
// ExitFailed.
func (c *command) print(resp *http.Response, body []byte) int {
	c.stdout.Write(body)
	switch {
	case resp.StatusCode < 300:
		return 0
	case resp.StatusCode == http.StatusConflict:
		return ExitNotAcquired
	}
	return ExitFailed
}

func ms(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	v := d.Milliseconds()
	return &v
}
