package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The cap on what one principal holds at once, across every replica (Options.MaxHeld).
//
// Each principal has a ledger in Redis (held.lua): a zset of the holds it counts, one per lock or
// semaphore permit a lease of the principal holds (a multi-lock counts one per member), each
// counted until the latest moment it can lapse. A new lease is counted before its grant is asked
// for, and refused with a *QuotaExceededError when it would not fit; a request that ends without
// a grant takes its count back. Release takes a hold's count back, renewals and re-entries move its
// end. Holds that lapse, or that a crash or a lost reply left counted, stop counting at their end:
// nothing needs to clean the ledger.
//
// The ledger is not updated in the scripts that grant and free: a lock and its principal's ledger
// live in different hash tags, which a Redis Cluster cannot touch in one script, and every
// granting script (hand-offs among them) would carry the principal. Counting first instead never
// lets a principal hold more than its cap; the price is that a waiting request counts while it
// waits (another replica's release may hand it the lock at any moment), and that a hold taken
// from its lease by a force release, or a lease that lost its hold without a release, counts until
// its end: its TTL's, or for a watchdog lease its max hold's.

// heldSlack is added to the end of every count: the grant follows the count by a round trip, and
// on Redis Cluster the lock and the ledger read different clocks.
const heldSlack = time.Second

// QuotaExceededError refuses a new lease (or multi-lock) that would take its principal past the
// number of holds it may have at once (Options.MaxHeld). It matches ErrQuotaExceeded.
type QuotaExceededError struct {
	Principal string
	Max       int
	// RetryAfter is when the first counted hold lapses, at most a second: a release may come sooner.
	RetryAfter time.Duration
}

func (e *QuotaExceededError) Error() string {
	return fmt.Sprintf("%s: principal %q holds its %d locks and permits (counting the requests it has waiting)", ErrQuotaExceeded, e.Principal, e.Max)
}

// Is makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaExceededError) Is(target error) bool { return target == ErrQuotaExceeded }

// heldSpan is how long a new lease is counted: its wait, then its TTL, or a watchdog lease's max
// hold and its last TTL after it.
func heldSpan(ttl, wait time.Duration, watchdog bool, maxHold time.Duration) time.Duration {
	if watchdog {
		ttl += maxHold
	}
	return wait + ttl + heldSlack
}

// heldLedger counts what principals hold, against their cap: heldQuota when a cap is set
// (Options.MaxHeld), else noHeldLedger, which counts nothing.
type heldLedger interface {
	// count counts members for principal for span before their grant is asked for, or refuses
	// them with a *QuotaExceededError when they would not fit under its cap: own (see
	// AcquireRequest.HeldCap) or Options.MaxHeld.
	count(ctx context.Context, principal string, own int, span time.Duration, members ...string) error
	// extend makes members of principal still counted count span from now at least (a renewal or
	// a re-entry moved their end). A failure is logged: the holds may stop counting before they end.
	extend(ctx context.Context, principal string, span time.Duration, members ...string)
	// uncount takes members out of principal's count: released, or never granted. A failure is
	// logged: they count until their end.
	uncount(ctx context.Context, principal string, members ...string)
}

type noHeldLedger struct{}

func (noHeldLedger) count(context.Context, string, int, time.Duration, ...string) error { return nil }
func (noHeldLedger) extend(context.Context, string, time.Duration, ...string)           {}
func (noHeldLedger) uncount(context.Context, string, ...string)                         {}

// heldQuota is the ledger of the cap on held leases, in Redis (see above).
type heldQuota struct {
	e   *engine
	max int // Options.MaxHeld
}

func (h *heldQuota) count(ctx context.Context, principal string, own int, span time.Duration, members ...string) error {
	limit := h.max
	if own != 0 {
		limit = own
	}
	if principal == "" || limit < 0 { // only an authenticated caller is counted
		return nil
	}
	if len(members) > limit {
		return &QuotaExceededError{Principal: principal, Max: limit}
	}
	reply, err := h.run(ctx, principal, "reserve", limit, span, members)
	if err != nil {
		return err
	}
	r, err := ints(reply)
	if err != nil || len(r) < 1 || (r[0] == 0 && len(r) != 2) {
		return unexpectedReply("held", principal, r, err)
	}
	if r[0] == 0 {
		return &QuotaExceededError{Principal: principal, Max: limit, RetryAfter: min(time.Duration(r[1])*time.Millisecond, time.Second)}
	}
	return nil
}

func (h *heldQuota) extend(ctx context.Context, principal string, span time.Duration, members ...string) {
	if principal == "" {
		return
	}
	if _, err := h.run(ctx, principal, "extend", 0, span, members); err != nil {
		h.e.log.Warn("moving a hold's end in its principal's count failed; it may stop counting before it ends",
			"principal", principal, "err", err)
	}
}

func (h *heldQuota) uncount(ctx context.Context, principal string, members ...string) {
	if principal == "" {
		return
	}
	if _, err := h.run(ctx, principal, "free", 0, 0, members); err != nil {
		h.e.log.Warn("taking holds out of their principal's count failed; they count until they would have lapsed",
			"principal", principal, "err", err)
	}
}

// grantUnknown says whether err leaves it unknown if a grant was made (and kept): its count stays
// until its end. A request with an Idempotency-Key keeps a grant its caller left for its retry.
func grantUnknown(err error, idempotencyKey string) bool {
	return errors.Is(err, ErrUnavailable) || (idempotencyKey != "" && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)))
}

func (h *heldQuota) run(ctx context.Context, principal, op string, limit int, span time.Duration, members []string) ([]rueidis.RedisMessage, error) {
	args := append([]string{op, ms(span), strconv.Itoa(limit)}, members...)
	res := h.e.do(context.WithoutCancel(ctx), scripts.held, []string{h.e.space.prefix + "held:{" + principal + "}"}, args)
	if err := res.Error(); err != nil {
		return nil, classify(err)
	}
	return res.ToArray()
}
