package lockcore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// An Idempotency-Key names one request: its retries carry it to get the first answer again. The
// same key with another request (another operation, lock, owner, mode, TTL or lease) is refused
// with ErrIdempotencyKeyReused, as the IETF Idempotency-Key draft asks, instead of being taken for
// a retry (a release's record would answer an acquire) or for a new request. Each key's first
// request is kept, as a fingerprint, under a key of its own (idempotency_claim.lua) as long as its
// answer: one more Redis call for requests with a key, none without. RedLock does not offer it
// (a majority of masters would have to agree on the first request): there a reused key is not
// detected.

// claimIdempotencyKey records fingerprint as the request of key for window, or refuses the
// request when key was first sent with another one. Nothing for a request without a key.
func (s *Service) claimIdempotencyKey(ctx context.Context, key, fingerprint string, window time.Duration) error {
	if key == "" || s.dep.offers(featureKeyReuse) != nil {
		return nil
	}
	sum := sha256.Sum256([]byte(fingerprint))
	// As the call it guards, the claim goes on when the client leaves: its retry comes with the key.
	res := s.do(context.WithoutCancel(ctx), scripts.idempotencyClaim, []string{s.space.prefix + "idem-key:{" + key + "}"},
		[]string{base64.RawURLEncoding.EncodeToString(sum[:16]), ms(max(window, s.cfg.idemWindow))})
	n, err := res.AsInt64()
	if err != nil {
		return classify(err)
	}
	if n == 0 {
		return fmt.Errorf("%w: a retry must repeat its request exactly (the same operation, name, owner, mode, TTL and lease token); use a new key for a new request", ErrIdempotencyKeyReused)
	}
	return nil
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
