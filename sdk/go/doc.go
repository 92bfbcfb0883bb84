// Package leasegate is the Go client of the leasegate lock gateway.
//
// client.gen.go is generated from openapi.yaml by oapi-codegen (go generate ./sdk/go); a test fails
// when it is stale. This file's neighbours add only what generation cannot express: Lock, which
// long-polls for as long as asked (in chunks the server accepts), a Lease with Renew and Release,
// and errors that match with errors.Is (ErrHeld, ErrLeaseGone) and errors.As (*ProblemError).
//
//	c, _ := leasegate.New("http://127.0.0.1:8080")
//	lease, err := c.Lock(ctx, "nightly-report", leasegate.LockOptions{Owner: "cron-7", TTL: 30 * time.Second, Wait: time.Minute})
//	if err != nil { ... }
//	defer lease.Release(context.Background())
//	storage.Write(data, lease.Fence) // let the storage reject stale fences
package leasegate
