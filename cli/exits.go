package cli

import (
	"fmt"
	"strings"
)

// exitCodes is the list of exit codes that `leasegate NAME --help` ends with.
func exitCodes(name string) string {
	var codes [][2]string
	add := func(code any, meaning string) { codes = append(codes, [2]string{fmt.Sprint(code), meaning}) }
	head := "exit codes:\n"
	switch name {
	case "run", "elect":
		head = "exit codes: the command's own once it ran (128+N when signal N ended it), else leasegate's:\n"
	case "observe", "watch":
		add(0, "interrupted (SIGINT or SIGTERM): the end of following")
	case "list":
		add(0, "listed (nothing held is no error)")
	case "force-release":
		add(0, "force-released (nothing held is no error)")
	default:
		add(0, "the gateway answered 2xx (its JSON answer, like a problem's, is on stdout)")
	}
	add(ExitUsage, "usage: bad flags or arguments")
	add(ExitFailed, "the gateway answered an error, or could not be reached")
	switch name {
	case "run":
		add(ExitNotAcquired, "the lock stayed held (or every permit taken) for the whole --wait")
		add(ExitLeaseLost, "the lease was lost while the command ran; the command was stopped")
	case "elect":
		add(ExitNotAcquired, "someone else still led (or others waited first) for the whole --wait")
		add(ExitLeaseLost, "the lead was lost while the command ran; the command was stopped")
	case "acquire":
		add(ExitNotAcquired, "the lock stayed held (or every permit taken) for the whole --wait")
	}
	switch name {
	case "run", "elect":
		add(ExitCannotRun, "the command cannot be run")
		add(ExitNotFound, "the command was not found")
	}
	if name == "elect" {
		add("130, 143", "SIGINT or SIGTERM while campaigning (128 + the signal's number)")
	}
	var b strings.Builder
	b.WriteString(head)
	for _, c := range codes {
		fmt.Fprintf(&b, "  %-9s %s\n", c[0], c[1])
	}
	return b.String()
}
