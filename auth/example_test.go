package auth_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
)

// The example in deploy/ is a valid auth file.
func TestExampleFileLoads(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "deploy", "auth.example.json"))
	require.NoError(t, err)
	c, err := auth.Parse(data)
	require.NoError(t, err)
	require.Len(t, c.Principals, 4)
}
