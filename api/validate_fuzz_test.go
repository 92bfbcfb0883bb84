package api_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leasegate/leasegate/api"
)

// FuzzValidateLockName: whatever ValidateLockName accepts is 1-200 bytes of [A-Za-z0-9._:-] and
// not "." or "..", and it never panics.
func FuzzValidateLockName(f *testing.F) {
	for _, seed := range []string{"a", "orders.42", "..", ".", "...", "a/b", "a%2Fb", "{x}", "ü", "a\x00", strings.Repeat("a", 201)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if api.ValidateLockName(name) != nil {
			return
		}
		if name == "" || len(name) > api.MaxLockNameLen || name == "." || name == ".." {
			t.Fatalf("accepted %q", name)
		}
		if i := strings.IndexFunc(name, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-", c))
		}); i >= 0 {
			t.Fatalf("accepted %q with %q at %d", name, name[i], i)
		}
	})
}

// FuzzValidateOwner: whatever ValidateOwner accepts is valid UTF-8 of 1-128 characters without
// control characters or U+FFFD, and it never panics.
func FuzzValidateOwner(f *testing.F) {
	for _, seed := range []string{"w1", "billing-worker-7", "", "a\n", "a\x07", "\xff", "\ufffd", "日本", strings.Repeat("o", 129)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		if api.ValidateOwner(owner) != nil {
			return
		}
		n := utf8.RuneCountInString(owner)
		if !utf8.ValidString(owner) || n < 1 || n > api.MaxOwnerLen || strings.ContainsRune(owner, utf8.RuneError) ||
			strings.ContainsAny(owner, "\n\r\t\x00\x07\x7f") {
			t.Fatalf("accepted %q", owner)
		}
	})
}
