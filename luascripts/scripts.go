// Package luascripts holds leasegate's Redis Lua scripts, one file per atomic operation. Each file
// opens with its contract: the KEYS and ARGV it takes and the replies it gives.
//
// Layout of one lock named N under prefix P (every key shares the hash tag {N}, so a lock's keys
// live in one Redis Cluster slot):
//
//	P{N}        hash  <lease id> -> reentry count, plus metadata fields whose names start with ':'
//	                  (:owner, :fence, :ttl, :wd); PEXPIRE = the lease's TTL
//	P{N}:fence  string, the last fence granted for N; never expires
package luascripts

import _ "embed"

// Acquire grants a free lock to a new lease.
//
//go:embed acquire.lua
var Acquire string

// Reenter increments the reentry count of a held lease.
//
//go:embed reenter.lua
var Reenter string

// Release decrements a lease's reentry count and frees the lock at zero.
//
//go:embed release.lua
var Release string

// Renew extends a held lease's TTL.
//
//go:embed renew.lua
var Renew string

// Inspect reads a lock's state without changing it.
//
//go:embed inspect.lua
var Inspect string
