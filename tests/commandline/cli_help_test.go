package commandline

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/leasegate/leasegate/cli"
)

// TestCLIHelpListsExitCodes: every command's --help ends with its exit codes, run's and elect's
// with each code they exit with besides the command's own.
func TestCLIHelpListsExitCodes(t *testing.T) {
	t.Parallel()
	environ := []string{"PATH=" + os.Getenv("PATH")}
	common := []int{cli.ExitUsage, cli.ExitFailed}
	want := map[string][]int{
		"run":     slices.Concat(common, []int{cli.ExitNotAcquired, cli.ExitLeaseLost, cli.ExitCannotRun, cli.ExitNotFound}),
		"elect":   slices.Concat(common, []int{cli.ExitNotAcquired, cli.ExitLeaseLost, cli.ExitCannotRun, cli.ExitNotFound}),
		"acquire": slices.Concat(common, []int{cli.ExitNotAcquired}),
	}
	for _, name := range cli.Commands {
		r := <-startCLIProcess(t, environ, name, "--help")
		assert.Equal(t, 0, r.code, "%s --help: %s", name, r.stderr)
		assert.Regexp(t, `(?m)^exit codes`, r.stderr, "%s --help", name)
		codes, ok := want[name]
		if !ok {
			codes = common
		}
		for _, code := range codes {
			assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^  %d +\S`, code)), r.stderr, "%s --help lists %d", name, code)
		}
	}
	r := <-startCLIProcess(t, environ, "elect", "--help")
	assert.Regexp(t, `(?m)^  130, 143 +SIGINT or SIGTERM while campaigning`, r.stderr)
}
