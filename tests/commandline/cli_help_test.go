package commandline

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/leasegate/leasegate/cli"
)

// TestCLIHelpListsExitCodes: run's and elect's --help end with every exit code they use besides
// the command's own (the other commands' --help end with theirs the same way: list's stands for
// them).
func TestCLIHelpListsExitCodes(t *testing.T) {
	t.Parallel()
	common := []int{cli.ExitUsage, cli.ExitFailed}
	lockCodes := slices.Concat(common, []int{cli.ExitNotAcquired, cli.ExitLeaseLost, cli.ExitCannotRun, cli.ExitNotFound})
	want := map[string][]int{"run": lockCodes, "elect": lockCodes, "list": common}
	helps := map[string]<-chan cliRun{}
	for name := range want {
		helps[name] = startCLIProcess(t, bareEnviron(), name, "--help")
	}
	for name, codes := range want {
		r := <-helps[name]
		assert.Equal(t, 0, r.code, "%s --help: %s", name, r.stderr)
		assert.Regexp(t, `(?m)^exit codes`, r.stderr, "%s --help", name)
		for _, code := range codes {
			assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^  %d +\S`, code)), r.stderr, "%s --help lists %d", name, code)
		}
		if name == "elect" {
			assert.Regexp(t, `(?m)^  130, 143 +SIGINT or SIGTERM while campaigning`, r.stderr)
		}
	}
}

// bareEnviron is an environment with PATH alone, for commands that reach no gateway, and GORACE's
// atexit_sleep_ms=0 (see cliEnv).
func bareEnviron() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
}
