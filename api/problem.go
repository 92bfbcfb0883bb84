package api

// ContentTypeProblem is the media type of every error body (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// Problem types: stable URIs, one per kind of error. Clients switch on these, never on titles.
const (
	TypeInvalidRequest          = "urn:leasegate:problem:invalid-request"
	TypeInvalidLockName         = "urn:leasegate:problem:invalid-lock-name"
	TypeInvalidLeaseToken       = "urn:leasegate:problem:invalid-lease-token"
	TypeBodyTooLarge            = "urn:leasegate:problem:body-too-large"
	TypeLockHeld                = "urn:leasegate:problem:lock-held"
	TypeLeaseGone               = "urn:leasegate:problem:lease-gone"
	TypeNotFound                = "urn:leasegate:problem:not-found"
	TypeMethodNotAllowed        = "urn:leasegate:problem:method-not-allowed"
	TypeBackendUnavailable      = "urn:leasegate:problem:backend-unavailable"
	TypeTooManyWaiters          = "urn:leasegate:problem:too-many-waiters"
	TypeTooManyStreams          = "urn:leasegate:problem:too-many-streams"
	TypeShuttingDown            = "urn:leasegate:problem:shutting-down"
	TypeUpgradeRefused          = "urn:leasegate:problem:upgrade-refused"
	TypePermitsMismatch         = "urn:leasegate:problem:permits-mismatch"
	TypeSemaphoreFull           = "urn:leasegate:problem:semaphore-full"
	TypeInternal                = "urn:leasegate:problem:internal"
	TypeNotSupported            = "urn:leasegate:problem:not-supported"
	TypeUnauthenticated         = "urn:leasegate:problem:unauthenticated"
	TypeForbidden               = "urn:leasegate:problem:forbidden"
	TypeQuotaExceeded           = "urn:leasegate:problem:quota-exceeded"
	TypeAuthenticationThrottled = "urn:leasegate:problem:authentication-throttled"
	TypeHeadersTooLarge         = "urn:leasegate:problem:headers-too-large"
	TypeIdempotencyKeyReused    = "urn:leasegate:problem:idempotency-key-reused"
	TypeElectionLed             = "urn:leasegate:problem:election-led"
)

// Problem is an RFC 9457 problem details body, with leasegate's extension members.
type Problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail"`
	RequestID    string `json:"request_id,omitempty"`
	Lock         string `json:"lock,omitempty"`
	Semaphore    string `json:"semaphore,omitempty"`
	Election     string `json:"election,omitempty"`
	Permits      *int64 `json:"permits,omitempty"` // the semaphore's size (permits-mismatch)
	RetryAfterms *int64 `json:"retry_after_ms,omitempty"`
	Waitedms     *int64 `json:"waited_ms,omitempty"`
	QueueTicket  string `json:"queue_ticket,omitempty"`
	// Locks, for a multi-lock: the members held (lock-held) or no longer held (lease-gone).
	Locks []string `json:"locks,omitempty"`
	// ForcedAt, with lease-gone: when a force release removed the lease (RFC 3339, ms), where the
	// gateway knows; absent when the lease expired or was released with its own token.
	ForcedAt string `json:"forced_at,omitempty"`
	// Permission, with forbidden: the permission the principal lacks; Name: the lock or semaphore
	// name outside its prefixes.
	Permission    string         `json:"permission,omitempty"`
	Name          string         `json:"name,omitempty"`
	InvalidParams []InvalidParam `json:"invalid_params,omitempty"`
}

// InvalidParam names one rejected input and why.
type InvalidParam struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}
