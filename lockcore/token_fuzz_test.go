package lockcore_test

import (
	"strings"
	"testing"

	"github.com/leasegate/leasegate/lockcore"
)

// FuzzTokenParse feeds Parse arbitrary strings: it must never panic, must refuse anything but a
// token it minted for that lock (a forgery or an alteration never parses), and a token it does
// parse must mint back to itself. The seed corpus is a real token, its alterations and
// look-alikes; `go test` runs the seeds, scripts/test also fuzzes briefly.
func FuzzTokenParse(f *testing.F) {
	tokens := newTokens(f, testSecret)
	good := tokens.Mint(testLease)
	f.Add(good)
	f.Add(good + "x")
	f.Add(good[:len(good)-1])
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add(strings.ToUpper(good))
	f.Add("")
	f.Add(".")
	f.Add("a.b")
	f.Add(strings.Repeat("A", 5000))
	f.Add(newTokens(f, otherSecret).Mint(testLease))
	f.Add(tokens.Mint(lockcore.Lease{Lock: "other", Owner: "o", ID: testLeaseID, Fence: 1}))
	f.Fuzz(func(t *testing.T, token string) {
		l, err := tokens.Parse(token, testLease.Ref())
		if err != nil {
			return
		}
		if l.Lock != testLease.Lock {
			t.Fatalf("a token for %q parsed for %q", l.Lock, testLease.Lock)
		}
		if again := tokens.Mint(l); again != token {
			t.Fatalf("parsed %q, which mints back to %q", token, again)
		}
	})
}
