package lockcore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A redirection that outlasted its call's budget is a 503 (retry later), never a 500: seen in
// the fault checker, an acknowledged acquire during a key-by-key slot migration answered 500 with
// "redis: ASK 4111 127.0.0.1:44717".
func TestRedirectionsAreTransient(t *testing.T) {
	for _, msg := range []string{"ASK 4111 127.0.0.1:44717", "MOVED 4111 127.0.0.1:44717",
		"TRYAGAIN Multiple keys request during rehashing of slot", "CLUSTERDOWN The cluster is down",
		"READONLY You can't write against a read only replica.", "LOADING Redis is loading the dataset in memory"} {
		assert.True(t, transientReply(msg), msg)
	}
	for _, msg := range []string{"ERR wrong number of arguments for 'evalsha' command", "NOSCRIPT No matching script", "ASKING is not a redirection"} {
		assert.False(t, transientReply(msg), msg)
	}
}
