package commandline

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

// env is testkit's Env that tests also drive with the command line (startCLI, cli).
type env struct{ *testkit.Env }

func newEnv(t *testing.T, gwEnv map[string]string) *env {
	t.Helper()
	return &env{testkit.NewEnv(t, gwEnv)}
}

// securedEnv is testkit's SecuredEnv that tests also drive with the command line (startCLI, cli,
// keyFile).
type securedEnv struct{ *testkit.SecuredEnv }

func newSecuredEnv(t *testing.T) *securedEnv {
	t.Helper()
	return &securedEnv{testkit.NewSecuredEnv(t)}
}
