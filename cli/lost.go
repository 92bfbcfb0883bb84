package cli

import (
	"errors"
	"fmt"
	"strings"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// lease names what run or elect holds, for messages: `the lease on lock "a"`, `the lease on
// semaphore "s"`, `the lead of election "e"`.
func (t target) lease() string {
	if t.election != "" {
		return "the lead of " + t.String()
	}
	return "the lease on " + t.String()
}

// lossReason says, in words that do not name the lease again, why a hold was lost, from the error
// that told it: the *leasegate.LostError of its events stream ("an operator force-released it",
// "it expired on the gateway"), or a 410 answer, whose detail says what the gateway knows.
func lossReason(err error) string {
	var (
		lost *leasegate.LostError
		p    *leasegate.ProblemError
	)
	switch {
	case errors.As(err, &lost):
		it := "it"
		if lost.MultiLock != "" {
			it = fmt.Sprintf("its member %q", lost.Lock)
		}
		switch {
		case lost.Reason == leasegate.EndForced:
			return "an operator force-released " + it
		case lost.Reason == leasegate.EndExpired:
			return it + " expired on the gateway"
		case lost.Err != nil:
			return lossReason(lost.Err)
		}
		return "the gateway no longer has " + it
	case errors.As(err, &p) && errors.Is(p, leasegate.ErrLeaseGone):
		// The detail names the lease, then says what became of it: "lease no longer holds the
		// lock: lock "a", lease 7d1c…: an operator force-released it at <time>" (or "it expired
		// … or was released with its own token; …"). The name is said already: keep the rest.
		if i := strings.LastIndex(p.Detail, ": "); i >= 0 {
			return p.Detail[i+2:]
		}
		return p.Detail
	}
	return err.Error()
}
