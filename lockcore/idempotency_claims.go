package lockcore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// An Idempotency-Key names one request: its retries carry it to get the first answer again. The
// same key with another request (another operation, lock, owner, mode, TTL or lease) is refused
// with ErrIdempotencyKeyReused, as the IETF Idempotency-Key draft asks, instead of being taken for
// a retry (a release's record would answer an acquire) or for a new request. Each key's first
// request is kept, as a fingerprint, under a key of its own (Pidem-key:{K}) as long as its answer.
// Where that key may go in one script with the lock's (the deployment's slot says so: on one
// Redis, always), the claim rides on the request's scripts (claim.lua opens them) and costs no
// round trip; elsewhere (a Cluster, where it lives in another slot) it is a command of its own
// before them: SET NX GET, which claims a fresh key or says whose it is. RedLock does not offer
// it (a majority of masters would have to agree on the first request): there a reused key is not
// detected.

// idemClaim is a claim to send with a request's scripts: its key, fingerprint and window (ms).
type idemClaim struct {
	key, fingerprint, ms string
}

// claimMark opens a claim's arguments at the end of a script's ARGV (see claim.lua).
const claimMark = "\x00claim"

// reusedReply starts the error reply of claim.lua for a key first sent with another request.
const reusedReply = "IDEMPOTENCY_KEY_REUSED"

// errKeyReused is ErrIdempotencyKeyReused, saying what to do.
var errKeyReused = fmt.Errorf("%w: a retry must repeat its request exactly (the same operation, name, owner, mode, TTL and lease token); use a new key for a new request", ErrIdempotencyKeyReused)

// claimIdempotencyKey claims key for fingerprint, the request on the lock ref, for window (at
// least the idempotency window): it returns the claim for the request's scripts to take, or
// takes it now with a call of its own and returns nil, refusing the request when key was first
// sent with another one. Nothing for a request without a key, or where keys are not claimed.
func (s *Service) claimIdempotencyKey(ctx context.Context, ref Ref, key, fingerprint string, window time.Duration) (*idemClaim, error) {
	if key == "" || s.dep.offers(featureKeyReuse) != nil {
		return nil, nil
	}
	sum := sha256.Sum256([]byte(fingerprint))
	c := &idemClaim{key: s.space.prefix + "idem-key:{" + key + "}", fingerprint: base64.RawURLEncoding.EncodeToString(sum[:16]),
		ms: ms(max(window, s.cfg.idemWindow))}
	if s.dep.slot(c.key) == s.dep.slot(s.space.lockKey(ref)) {
		return c, nil
	}
	// As the call it guards, the claim goes on when the client leaves: its retry comes with the key.
	rc := s.dep.copies()[0]
	prev, err := rc.Do(context.WithoutCancel(ctx), rc.B().Set().Key(c.key).Value(c.fingerprint).Nx().Get().
		Px(max(window, s.cfg.idemWindow)).Build()).ToString()
	switch {
	case rueidis.IsRedisNil(err): // claimed now
		return nil, nil
	case err != nil:
		return nil, classify(err)
	case prev != c.fingerprint:
		return nil, errKeyReused
	}
	return nil, nil
}

// fingerprint is what makes two acquires the same request (token: a re-entry's Lease-Token): not
// their wait (a long wait is sent as several requests with one key) nor their queue ticket.
func (req AcquireRequest) fingerprint(token string) string {
	return strings.Join([]string{"acquire", req.Kind.String(), req.Lock, token, req.Owner, string(req.mode()),
		strconv.FormatInt(req.TTL.Milliseconds(), 10), strconv.FormatBool(req.Watchdog),
		strconv.FormatInt(req.MaxHold.Milliseconds(), 10), strconv.FormatInt(req.Permits, 10)}, "\n")
}

// releaseFingerprint is what makes two releases of lease l the same request.
func releaseFingerprint(l Lease, mode Mode) string {
	return strings.Join([]string{"release", l.Kind.String(), l.Lock, l.ID, string(mode)}, "\n")
}
