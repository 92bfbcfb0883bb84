package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/auth"
)

// Streams bound the live event streams of this replica (GET /locks/{name}/events and
// /semaphores/{name}/events): each holds a connection, a goroutine or two and a subscription to
// its lock, so that no client, authenticated or not, may open them without limit or keep one
// open after its credentials stopped being good.
type Streams struct {
	// Max is how many streams may be open at once on this replica, whoever opens them
	// (LEASEGATE_MAX_STREAMS); more are answered 503 too-many-streams. 0: no limit.
	Max int
	// Lifetime is how long a stream lasts at most (LEASEGATE_MAX_STREAM_LIFETIME): it then ends
	// with a "closed" event (reason "lifetime"), and its client reconnects. 0: no limit.
	Lifetime time.Duration
}

// reauthorizeEvery is how often an open stream checks its request's credentials again (an API key
// removed from the auth file, a JWT past its exp, a permission or prefix taken away), so that a
// stream outlives its credentials by about this long, plus the auth file's own reload interval.
const reauthorizeEvery = time.Second

// tooManyStreamsError: this replica already has Streams.Max open streams.
type tooManyStreamsError struct{ max int }

func (e *tooManyStreamsError) Error() string {
	return fmt.Sprintf("this replica already streams %d live event streams (LEASEGATE_MAX_STREAMS); retry later, or on another replica", e.max)
}

// streamGate counts the open streams of this replica against Streams.Max.
type streamGate struct {
	Streams
	open atomic.Int64
}

// admit counts a new stream of the request until done is called, or refuses it: over the
// replica's cap (503), or over its principal's quota of open streams (429).
func (g *streamGate) admit(r *http.Request, q *quotas) (done func(), err error) {
	if n := g.open.Add(1); g.Max > 0 && n > int64(g.Max) {
		g.open.Add(-1)
		return nil, &tooManyStreamsError{max: g.Max}
	}
	own, err := q.admitStream(principalFrom(r.Context()))
	if err != nil {
		g.open.Add(-1)
		return nil, err
	}
	return func() { own(); g.open.Add(-1) }, nil
}

// streamEnd says why an open stream must end now, or nil: its credentials no longer allow it
// (reauthorize, nil without authentication), or it reached its lifetime's end (zero: none). The
// reason is the "closed" event's (api.ClosedEvent).
func streamEnd(reauthorize func() error, endOfLife time.Time, now time.Time) (reason string, err error) {
	if reauthorize != nil {
		if err := reauthorize(); err != nil {
			var denied *auth.ForbiddenError
			switch {
			case errors.As(err, &denied):
				return "forbidden", err
			case errors.Is(err, auth.ErrUnauthenticated):
				return "unauthenticated", err
			}
			return "forbidden", err // a name that no longer validates cannot happen: the request's stays as it was
		}
	}
	if !endOfLife.IsZero() && !now.Before(endOfLife) {
		return "lifetime", errors.New("the stream reached its maximum lifetime (LEASEGATE_MAX_STREAM_LIFETIME): reconnect")
	}
	return "", nil
}
