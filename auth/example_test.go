package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
)

// The example in deploy/ cannot be loaded as it is (its keys are placeholders, so that a gateway
// started from it lets nobody in with a key anyone could read), and loads once each placeholder is
// replaced by a real key's hash.
func TestExampleFileLoadsOnlyWithRealKeys(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "deploy", "auth.example.json"))
	require.NoError(t, err)
	_, err = auth.Parse(data)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "placeholder")
	assert.Contains(t, err.Error(), "leasegate auth-key")

	n := 0
	filled := regexp.MustCompile(`sha256:REPLACE[^"]*`).ReplaceAllFunc(data, func([]byte) []byte {
		n++
		sum := sha256.Sum256([]byte("a real key, long and random " + string(rune('a'+n))))
		return []byte("sha256:" + hex.EncodeToString(sum[:]))
	})
	c, err := auth.Parse(filled)
	require.NoError(t, err)
	require.Len(t, c.Principals, 4)
}

// Keys anyone could guess are refused: the empty key, example words, earlier examples' keys.
func TestGuessableKeysAreRefused(t *testing.T) {
	for _, key := range []string{"", "foo", "bar", "baz", "password", "changeme"} {
		sum := sha256.Sum256([]byte(key))
		file := `{"principals":[{"name":"p","keys":["sha256:` + hex.EncodeToString(sum[:]) + `"],"prefixes":["*"],"permissions":["lock"]}]}`
		_, err := auth.Parse([]byte(file))
		require.Error(t, err, "key %q", key)
		assert.Contains(t, err.Error(), "guessable")
	}
}
