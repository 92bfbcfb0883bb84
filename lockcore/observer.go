package lockcore

import (
	"time"
)

// GrantHow tells how a lease got its hold.
type GrantHow string

const (
	GrantNew      GrantHow = "new"       // granted at once
	GrantReentry  GrantHow = "reentry"   // a lease that held already, held once more
	GrantHandOff  GrantHow = "handoff"   // granted after waiting
	kindMultiLock          = "multilock" // the kind label of a multi-lock's operations
)

// WaitOutcome tells how a waiting acquire ended.
type WaitOutcome string

const (
	WaitGranted   WaitOutcome = "granted"
	WaitTimedOut  WaitOutcome = "timeout"
	WaitAbandoned WaitOutcome = "abandoned" // its client left
	WaitFailed    WaitOutcome = "error"
)

// Observer hears what the Service does, for metrics. Its methods run on the lock path: they must
// be cheap and must not block. kind is "lock", "semaphore" or "multilock"; mode "exclusive" or
// "shared".
type Observer interface {
	Granted(kind string, mode Mode, how GrantHow, waited time.Duration)
	HoldReleased(kind string, mode Mode, held time.Duration)
	Refused(kind string)       // an acquire answered "held" (409)
	Lost(kind string)          // a call on a lease that no longer holds (410)
	ForceReleased(kind string) // a force-release
	WaitStarted(kind string)
	WaitEnded(kind string, outcome WaitOutcome)
	WatchdogSwept(duties int)
	WatchdogRenewal(outcome string) // "renewed", "lost", "ended" or "error"
	ScriptCall(name string, failed bool, took time.Duration)
	RedisError()
	Resubscribed()
	// ElectionLogged: this replica appended an entry to an election's log: "elected", "proclaimed",
	// "resigned" or "vacant" (see election.go).
	ElectionLogged(event string)
}

// nopObserver is the Observer of a Service given none.
type nopObserver struct{}

func (nopObserver) Granted(string, Mode, GrantHow, time.Duration) {}
func (nopObserver) HoldReleased(string, Mode, time.Duration)      {}
func (nopObserver) Refused(string)                                {}
func (nopObserver) Lost(string)                                   {}
func (nopObserver) ForceReleased(string)                          {}
func (nopObserver) WaitStarted(string)                            {}
func (nopObserver) WaitEnded(string, WaitOutcome)                 {}
func (nopObserver) WatchdogSwept(int)                             {}
func (nopObserver) WatchdogRenewal(string)                        {}
func (nopObserver) ScriptCall(string, bool, time.Duration)        {}
func (nopObserver) RedisError()                                   {}
func (nopObserver) Resubscribed()                                 {}
func (nopObserver) ElectionLogged(string)                         {}
