// Package leasegate is the Go client of the leasegate lock gateway: take a lock (exclusive or
// shared), several locks at once, a semaphore's permit or an election's lead, keep its lease
// alive, and stop work before the lease can lapse.
//
//	gw, _ := leasegate.New("http://127.0.0.1:8080")
//	lease, err := gw.Lock(ctx, "nightly-report", leasegate.LockOptions{Owner: "cron-7", TTL: 30 * time.Second, Wait: 10 * time.Minute})
//	if errors.Is(err, leasegate.ErrHeld) { ... } // still held after 10 minutes
//	defer lease.Release(context.Background())
//	lease.KeepAlive()                          // renew every TTL/3 until released or lost
//	err = writeReport(lease.Context(), lease.Fence) // cancelled before the lease can lapse
//
// Lock waits in the lock's FIFO queue, splitting a long wait into long-polls that keep their
// place, and retries a 503 within the wait. A Lease is safe for concurrent use; its Done, Context
// and Err tell when work under it must stop: a renewal found it gone (ErrLeaseGone), its events
// stream told that it was force-released or expired (ErrLeaseForced, ErrLeaseExpired: see below),
// it was released (ErrReleased), or no renewal succeeded and it would lapse within its safety
// margin (ErrLeaseLapsing), measured from when the request that last extended it was sent. Renew,
// Reenter and Release carry an Idempotency-Key and retry a lost answer or a 503 with it, so a
// retry never takes or gives back a hold twice. Errors from the gateway are *ProblemError, whose
// message includes the problem's detail and every rejected input.
//
// # Learning of a loss at once
//
// A renewal tells that a lease is gone only when it is due (every TTL/3). A watched lease also
// follows its lock's events stream (GET /locks/{name}/events with its Lease-Token; a semaphore's,
// for a permit; each member's, for a multi-lock) and closes Done within milliseconds of a force
// release or an expiry on the gateway, with Err a *LostError matching ErrLeaseForced or
// ErrLeaseExpired (and ErrLeaseGone). By default (WatchKept) a lease is watched from KeepAlive on,
// and a watchdog lease from its grant: a watched lease holds one more HTTP connection for its
// whole life, which a lease taken for one short call does not need. LockOptions.WatchLoss (and
// the same field of SemaphoreOptions and MultiLockOptions) says WatchAlways or WatchNever instead,
// and Watch starts it by hand, through several replicas if given. A dropped stream is reopened
// while the lease lives, and the reopening checks that the lease survived the gap. Release ends
// the lease too, with ErrReleased (EndReason EndReleased), never as a loss.
//
//	lease.KeepAlive() // renews, and watches the events stream
//	select {
//	case <-lease.Done(): // errors.Is(lease.Err(), leasegate.ErrLeaseForced): an operator broke the lock
//	case err := <-work:
//	}
//
// # Read-write locks
//
// LockOptions.Mode ModeShared takes a shared (read) hold: shared leases of a lock coexist, and an
// exclusive one (the default) excludes every other. Lease.Mode tells how a lease holds its lock.
// A shared lease asking for ModeExclusive (ReenterMode) gets ErrUpgradeRefused; an exclusive one
// may take a shared hold too, and then holds the lock both ways: Release gives back its exclusive
// hold first (a downgrade, with nobody in between), ReleaseMode picks the hold.
//
//	r, err := gw.Lock(ctx, "catalog", leasegate.LockOptions{Owner: "reader-2", Mode: leasegate.ModeShared, Wait: time.Minute})
//
// # Semaphores
//
// AcquireSemaphore takes one permit of a counting semaphore of SemaphoreOptions.Permits permits
// (its size, set by whoever acquires while nobody holds or waits). It waits as Lock does, and the
// permit is a *Lease like a lock's: KeepAlive, Done/Context/Err, ValidUntil, Renew, Reenter and
// Release work the same, and Lease.Permits is the semaphore's size. A wait that runs out returns
// an error matching ErrSemaphoreFull; a request naming another size, ErrPermitsMismatch, whose
// *ProblemError tells the size (SemaphorePermits). Semaphores are a name space apart from locks:
// neither's token is accepted by the other's endpoints.
//
//	permit, err := gw.AcquireSemaphore(ctx, "partner-api", leasegate.SemaphoreOptions{Owner: "worker-3", Permits: 5, Wait: time.Minute})
//	if errors.Is(err, leasegate.ErrSemaphoreFull) { ... } // no permit came free within a minute
//	defer permit.Release(context.Background())
//
// # Multi-locks
//
// LockAll takes 2-64 locks all or none under one lease, a *MultiLease: one token and TTL, renewed
// and released together (Renew, KeepAlive, Release), with a fence per member (Members, Fence).
// KeepAlive, Done, Context, Err and ValidUntil work as for a Lease; a renewal finding that a
// member ran out gets ErrLeaseGone (the gateway frees the others) and ends the lease. Waiting,
// the gateway takes the members in name order, so groups that overlap cannot deadlock. A wait
// that runs out returns an error matching ErrHeld whose *ProblemError lists the held members
// (Members). The members are ordinary locks: Inspect shows the group's id in LockState.Multilock.
// Multi-lock calls take no Idempotency-Key and cannot be re-entered.
//
//	group, err := gw.LockAll(ctx, []string{"account.17", "account.42"}, leasegate.MultiLockOptions{Owner: "transfer-3", TTL: 30 * time.Second, Wait: time.Minute})
//	if errors.Is(err, leasegate.ErrHeld) { ... } // some still held after a minute: the *ProblemError's Members()
//	defer group.Release(context.Background())
//	group.KeepAlive()
//	err = transfer(group.Context(), group.Fence("account.17"), group.Fence("account.42"))
//
// # Elections
//
// Campaign campaigns in an election (a name space apart from locks), waiting in line as Lock
// does (ErrLed when the wait runs out), and returns a *Lead: a *Lease of the election (KeepAlive,
// Renew, Done, Context, Err, ValidUntil, with a lease's lapse rule) that announces a value, with
// Proclaim and Resign. A watched lead (see WatchLoss) follows the election's events stream, which
// takes no token: it looks for its own fence, so a force release or an expiry (vacant) closes Done
// within milliseconds (after one renewal, whose 410 tells a force release, ErrLeaseForced, from
// the rest), and a state showing another lead is confirmed by a renewal. Observe returns
// a channel of the election's events (ElectionEvent), reconnecting through several replicas with
// Last-Event-ID so that none is missed or repeated; a state event with Gap says when the log no
// longer held what was missed.
//
//	lead, err := gw.Campaign(ctx, "scheduler", "10.0.3.7:8080", leasegate.CampaignOptions{Owner: "sched-1", Wait: time.Hour})
//	lead.KeepAlive()
//	defer lead.Resign(context.Background())
//	for ev := range gw.Observe(ctx, "scheduler", "") { ... } // elsewhere: state, elected, proclaimed, resigned, vacant
//
// # Authentication and HTTPS
//
// A gateway with an auth file (LEASEGATE_AUTH_FILE) wants an API key on every call but its
// probes. WithAPIKey sends one as "Authorization: Bearer KEY" on every request of the Gateway:
// acquires, renewals, releases, the events streams of watched leases and the calls made through
// Gateway.API. Without a key (or with one the gateway does not know) a call fails with an error
// matching ErrUnauthenticated (401), and one the key's principal may not make with ErrForbidden
// (403), whose *ProblemError names the missing Permission or the Name outside its prefixes; the
// message carries the gateway's detail. For a gateway serving HTTPS with a certificate a private
// CA signed, WithCAFile trusts that CA's certificate (instead of the system's roots, as curl
// --cacert does), and WithTLSConfig takes a whole *tls.Config (a client certificate for a gateway
// that requires one, say). Both give the Gateway an *http.Client of its own, replacing one given
// with WithHTTPClient: to keep your own client, set its transport's TLSClientConfig yourself,
// with LoadCAFile for the RootCAs.
//
//	gw, err := leasegate.New("https://locks.internal:8443",
//		leasegate.WithAPIKey(os.Getenv("LEASEGATE_API_KEY")), // "" sends no header
//		leasegate.WithCAFile("/etc/leasegate/ca.crt"))
//	_, err = gw.Lock(ctx, "billing.nightly", leasegate.LockOptions{Owner: "cron-7"})
//	if errors.Is(err, leasegate.ErrUnauthenticated) { ... } // no key, or an unknown one
//
// client.gen.go is the generated client (oapi-codegen, from openapi.yaml: cd sdk/go && go generate; a
// test fails when it is stale); Gateway.API exposes it for calls this layer does not wrap.
package leasegate
