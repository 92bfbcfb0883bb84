// Package cli is leasegate's command line for scripts and cron: "run" runs a command under a lock
// (held exclusively or shared) or a semaphore's permit, and "acquire", "release", "renew" and
// "inspect" print the gateway's JSON answer. It talks to the gateway through the generated Go
// client (sdk/go).
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
	ExitNotAcquired = 75  // the lock stayed held (or the semaphore full) for the whole --wait (EX_TEMPFAIL)
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

// common are the flags every subcommand takes: what it acts on (--lock or --semaphore, with
// --shared, --mode and --permits where they apply) and where (--server).
type common struct {
	fs        *flag.FlagSet
	lock      *string
	semaphore *string
	permits   *int64
	shared    *bool   // run and acquire: take a shared hold; nil elsewhere
	mode      *string // release: which hold to give back; nil elsewhere
	server    *string
	// takes: the subcommand takes a hold (run, acquire), so a semaphore needs its size.
	takes bool
}

// maxPermits is the largest semaphore size the gateway accepts (openapi.yaml).
const maxPermits = 10000

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
	f := common{
		fs:        fs,
		lock:      fs.String("lock", "", "lock name (this or --semaphore is required)"),
		semaphore: fs.String("semaphore", "", "semaphore name, in place of --lock: one of its permits"),
		server:    fs.String("server", server, "gateway URL, or several replicas' URLs separated by commas (default from LEASEGATE_SERVER)"),
	}
	switch name {
	case "run", "acquire":
		f.takes = true
		f.shared = fs.Bool("shared", false, "hold the lock shared: shared holders coexist, an exclusive one excludes them all")
		f.permits = fs.Int64("permits", 0, fmt.Sprintf("with --semaphore (required): the semaphore's size, 1-%d; it must match its holders'", maxPermits))
	default:
		f.permits = fs.Int64("permits", 0, "with --semaphore: the semaphore's size (not needed here; accepted so that one set of flags serves every command)")
	}
	if name == "release" {
		f.mode = fs.String("mode", "", "which hold to give back, exclusive or shared, for a lease holding the lock both ways (default: the exclusive one)")
	}
	return f
}

// parse parses args, checks what the command acts on and the --server URLs, and sets c.gateways.
// It reports usage errors itself; ok is false when the command should not go on, code then being
// 0 after --help and ExitUsage after a usage error.
func (c *command) parse(f common, args []string) (t target, code int, ok bool) {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return t, 0, false
		}
		return t, ExitUsage, false
	}
	if err := f.target(&t); err != nil {
		fmt.Fprintln(c.stderr, "leasegate:", err)
		f.fs.Usage()
		return t, ExitUsage, false
	}
	for _, server := range strings.Split(*f.server, ",") {
		server = strings.TrimSpace(server)
		if !strings.Contains(server, "://") {
			server = "http://" + server // host:port, as etcdctl and consul accept it
		}
		gw, err := leasegate.New(server)
		if err != nil {
			fmt.Fprintf(c.stderr, "leasegate: --server %q: %v\n", server, err)
			return t, ExitUsage, false
		}
		c.gateways = append(c.gateways, gw)
	}
	return t, 0, true
}

// target checks the parsed --lock, --semaphore, --permits, --shared and --mode and sets t from
// them, or says what is wrong with them.
func (f common) target(t *target) error {
	switch {
	case *f.lock == "" && *f.semaphore == "" && f.takes:
		return errors.New("--lock is required, or --semaphore with --permits")
	case *f.lock == "" && *f.semaphore == "":
		return errors.New("--lock is required, or --semaphore")
	case *f.lock != "" && *f.semaphore != "":
		return errors.New("--lock and --semaphore exclude each other: give one")
	}
	permitsSet := isSet(f.fs, "permits")
	if *f.semaphore != "" {
		switch {
		case f.shared != nil && *f.shared:
			return errors.New("--shared is for locks: a semaphore's permits are all alike")
		case f.mode != nil && *f.mode != "":
			return errors.New("--mode is for locks: a semaphore's permits are all alike")
		case !permitsSet && f.takes:
			return errors.New("--semaphore needs --permits N, the semaphore's size")
		case permitsSet && (*f.permits < 1 || *f.permits > maxPermits):
			return fmt.Errorf("--permits must be between 1 and %d, got %d", maxPermits, *f.permits)
		}
		t.semaphore, t.permits = *f.semaphore, *f.permits
		return nil
	}
	if permitsSet {
		return errors.New("--permits goes with --semaphore, not --lock")
	}
	t.lock = *f.lock
	switch {
	case f.shared != nil && *f.shared:
		t.mode = leasegate.ModeShared
	case f.shared != nil:
		t.mode = leasegate.ModeExclusive
	case f.mode != nil && *f.mode != "":
		if t.mode = leasegate.Mode(*f.mode); !t.mode.Valid() {
			return fmt.Errorf("--mode must be exclusive or shared, got %q", *f.mode)
		}
	}
	return nil
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
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
	if notAcquired(err) {
		return ExitNotAcquired
	}
	return ExitFailed
}

// durationFlag is a duration flag in Go syntax ("30s").
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	return fs.Duration(name, def, usage+" (Go duration, e.g. 30s)")
}
