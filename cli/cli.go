// Package cli is leasegate's command line for scripts and cron: "run" runs a command under a lock,
// and "acquire", "release", "renew" and "inspect" print the gateway's JSON answer. It talks to the
// gateway through the generated Go client (sdk/go).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	leasegate "github.com/leasegate/leasegate/sdk/go"
)

// Exit codes besides a command's own.
const (
	ExitUsage       = 2   // bad flags or arguments
	ExitFailed      = 3   // the gateway answered an error, or could not be reached
	ExitNotAcquired = 75  // the lock stayed held for the whole --wait (EX_TEMPFAIL)
	ExitLeaseLost   = 76  // run: the lease was lost while the command ran; it was stopped
	ExitCannotRun   = 126 // run: the command exists but cannot be run (as shells do)
	ExitNotFound    = 127 // run: the command was not found (as shells do)
)

// Commands lists the subcommands Run handles.
var Commands = []string{"run", "acquire", "release", "renew", "inspect"}

// Env is what the CLI reads from the environment.
type Env struct {
	Server   string // LEASEGATE_SERVER
	Hostname string // for the default owner
}

// Run executes the subcommand args[0] and returns the process exit code.
func Run(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) int {
	c := &command{env: env, stdout: stdout, stderr: stderr}
	switch args[0] {
	case "run":
		return c.run(ctx, args[1:])
	case "acquire":
		return c.acquire(ctx, args[1:])
	case "release":
		return c.release(ctx, args[1:])
	case "renew":
		return c.renew(ctx, args[1:])
	case "inspect":
		return c.inspect(ctx, args[1:])
	}
	fmt.Fprintf(stderr, "leasegate: unknown command %q (want serve, healthcheck, %s)\n", args[0], strings.Join(Commands, ", "))
	return ExitUsage
}

type command struct {
	env            Env
	stdout, stderr io.Writer
	// gateways are the --server URLs (comma-separated) after parse; parse returns the first.
	gateways []*leasegate.Gateway
}

// common are the flags every subcommand takes.
type common struct {
	fs     *flag.FlagSet
	lock   *string
	server *string
}

func (c *command) flags(name, usage string) common {
	fs := flag.NewFlagSet("leasegate "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: leasegate %s %s\n", name, usage)
		fs.PrintDefaults()
	}
	server := c.env.Server
	if server == "" {
		server = "http://127.0.0.1:8080"
	}
	return common{
		fs:     fs,
		lock:   fs.String("lock", "", "lock name (required)"),
		server: fs.String("server", server, "gateway URL, or several replicas' URLs separated by commas (default from LEASEGATE_SERVER)"),
	}
}

// parse parses args and checks the lock name; it reports usage errors itself. It returns nil and
// the exit code when the command should not go on: 0 after --help, ExitUsage after a usage error.
func (c *command) parse(f common, args []string) (*leasegate.Gateway, int) {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, ExitUsage
	}
	if *f.lock == "" {
		fmt.Fprintln(c.stderr, "leasegate: --lock is required")
		f.fs.Usage()
		return nil, ExitUsage
	}
	for _, server := range strings.Split(*f.server, ",") {
		server = strings.TrimSpace(server)
		if !strings.Contains(server, "://") {
			server = "http://" + server // host:port, as etcdctl and consul accept it
		}
		gw, err := leasegate.New(server)
		if err != nil {
			fmt.Fprintf(c.stderr, "leasegate: --server %q: %v\n", server, err)
			return nil, ExitUsage
		}
		c.gateways = append(c.gateways, gw)
	}
	return c.gateways[0], 0
}

func (c *command) defaultOwner() string {
	host := c.env.Hostname
	if host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// fail reports err and returns the exit code it calls for.
func (c *command) fail(err error) int {
	fmt.Fprintln(c.stderr, "leasegate:", err)
	if errors.Is(err, leasegate.ErrHeld) {
		return ExitNotAcquired
	}
	return ExitFailed
}

// durationFlag is a duration flag in Go syntax ("30s").
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	return fs.Duration(name, def, usage+" (Go duration, e.g. 30s)")
}
