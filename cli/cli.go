// Package cli is leasegate's command line for scripts, cron and operators: "run" runs a command
// under a lock (held exclusively or shared), several locks at once (a multi-lock: --lock repeated)
// or a semaphore's permit, "elect" runs one while leader of an election, and "acquire", "release",
// "renew" and "inspect" print the gateway's JSON answer. For operators, "list" shows what is held
// and who waits, "force-release" breaks a hold, and "observe" and "watch" follow an election's or a
// lock's events. It talks to the gateway through the Go SDK (sdk/go), with an API key and a CA file
// to trust when given (access.go).
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
	ExitNotAcquired = 75  // the lock stayed held (or the semaphore full, or the election led) for the whole --wait (EX_TEMPFAIL)
	ExitLeaseLost   = 76  // run, elect: the lease (the lead) was lost while the command ran; it was stopped
	ExitCannotRun   = 126 // run, elect: the command exists but cannot be run (as shells do)
	ExitNotFound    = 127 // run, elect: the command was not found (as shells do)
)

// Commands lists the subcommands Run handles.
var Commands = []string{"run", "elect", "acquire", "release", "renew", "inspect", "list", "force-release", "observe", "watch"}

// Env is what the CLI reads from the environment.
type Env struct {
	Server     string // LEASEGATE_SERVER
	APIKey     string // LEASEGATE_API_KEY
	APIKeyFile string // LEASEGATE_API_KEY_FILE
	CAFile     string // LEASEGATE_CA_FILE
	Hostname   string // for the default owner
}

// Run executes the subcommand args[0] and returns the process exit code.
func Run(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) int {
	c := &command{env: env, stdout: stdout, stderr: stderr}
	switch args[0] {
	case "run":
		if len(args) == 2 && args[1] == guardArg { // run's own use, hidden: see guard.go
			return guard(os.Stdin, stdout, stderr)
		}
		return c.run(ctx, args[1:])
	case "elect":
		return c.elect(ctx, args[1:])
	case "acquire":
		return c.acquire(ctx, args[1:])
	case "release":
		return c.release(ctx, args[1:])
	case "renew":
		return c.renew(ctx, args[1:])
	case "inspect":
		return c.inspect(ctx, args[1:])
	case "list":
		return c.list(ctx, args[1:])
	case "force-release":
		return c.forceRelease(ctx, args[1:])
	case "observe":
		return c.observe(ctx, args[1:])
	case "watch":
		return c.watch(ctx, args[1:])
	}
	fmt.Fprintf(stderr, "leasegate: unknown command %q (want serve, healthcheck, %s)\n", args[0], strings.Join(Commands, ", "))
	return ExitUsage
}

type command struct {
	env            Env
	stdout, stderr io.Writer
	// gateways are the --server URLs (comma-separated) after parse; parse returns the first.
	gateways []*leasegate.Gateway
	// keyFrom says where the API key the gateways send came from ("--api-key-file k.txt",
	// "LEASEGATE_API_KEY"...), for messages; "" when they send none.
	keyFrom string
}

// common are the flags every subcommand takes: what it acts on (--lock, --semaphore, --multilock
// or --election, with --shared, --mode and --permits where they apply), where (--server) and how
// (--api-key, --api-key-file, --ca-file: see access.go).
type common struct {
	fs        *flag.FlagSet
	name      string // the subcommand's
	synopsis  string
	stderr    io.Writer
	locks     *lockNames // several only where a hold is taken (a multi-lock)
	semaphore *string
	multilock *string // release and renew: a multi-lock's id; nil elsewhere
	election  *string // inspect and force-release: an election's name; nil elsewhere
	permits   *int64
	shared    *bool   // run and acquire: take a shared hold; nil elsewhere
	mode      *string // release: which hold to give back; nil elsewhere
	server    *string
	access    accessFlags
	// takes: the subcommand takes a hold (run, acquire), so a semaphore needs its size, and
	// several --lock make a multi-lock.
	takes bool
}

// lockNames are the --lock flags, in the order given.
type lockNames []string

func (n *lockNames) String() string { return strings.Join(*n, ",") }

func (n *lockNames) Set(name string) error {
	*n = append(*n, name)
	return nil
}

// maxPermits is the largest semaphore size the gateway accepts, and maxMembers the most locks one
// multi-lock takes (openapi.yaml).
const (
	maxPermits = 10000
	maxMembers = 64
)

func (c *command) flags(name, usage string) common {
	fs := flag.NewFlagSet("leasegate "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors and usage: the flags' list after --help only

	server := c.env.Server
	if server == "" {
		server = "http://127.0.0.1:8080"
	}
	f := common{
		fs:       fs,
		name:     name,
		synopsis: usage,
		stderr:   c.stderr,
		server:   fs.String("server", server, "gateway URL, or several replicas' URLs separated by commas (default from LEASEGATE_SERVER)"),
		access:   c.accessFlags(fs),
	}
	switch name {
	case "elect", "observe", "list":
		return f // an election is named by an argument, a listing by none; they add their own flags
	}
	f.locks = &lockNames{}
	f.semaphore = fs.String("semaphore", "", "semaphore name, in place of --lock: one of its permits")
	switch name {
	case "run", "acquire":
		f.takes = true
		fs.Var(f.locks, "lock", fmt.Sprintf("lock `name` (this or --semaphore is required); repeat it to take 2-%d locks at once, all or none, as one multi-lock", maxMembers))
		f.shared = fs.Bool("shared", false, "hold the lock (every --lock) shared: shared holders coexist, an exclusive one excludes them all")
		f.permits = fs.Int64("permits", 0, fmt.Sprintf("with --semaphore (required): the semaphore's size, 1-%d; it must match its holders'", maxPermits))
	case "release", "renew":
		fs.Var(f.locks, "lock", "lock `name` (this, --semaphore or --multilock is required)")
		f.multilock = fs.String("multilock", "", "a multi-lock's id (its grant's \"id\"), in place of --lock: all its locks at once")
	case "inspect", "force-release":
		fs.Var(f.locks, "lock", "lock `name` (this, --semaphore or --election is required)")
		f.election = fs.String("election", "", "election `name`, in place of --lock")
	default:
		fs.Var(f.locks, "lock", "lock `name` (this or --semaphore is required)")
	}
	if !f.takes {
		f.permits = fs.Int64("permits", 0, "with --semaphore: the semaphore's size (not needed here; accepted so that one set of flags serves every command)")
	}
	if name == "release" {
		f.mode = fs.String("mode", "", "which hold to give back, exclusive or shared, for a lease holding the lock both ways (default: the exclusive one)")
	}
	return f
}

// usage prints the subcommand's synopsis; with every flag and its meaning and the exit codes after
// --help, else (after a usage error, below its message) where to find them.
func (f common) usage(help bool) {
	fmt.Fprintf(f.stderr, "usage: leasegate %s %s\n", f.name, f.synopsis)
	if help {
		f.fs.SetOutput(f.stderr)
		f.fs.PrintDefaults()
		fmt.Fprint(f.stderr, exitCodes(f.name))
		return
	}
	fmt.Fprintf(f.stderr, "(leasegate %s --help lists every flag)\n", f.name)
}

// parse parses args, checks what the command acts on and the --server URLs, and sets c.gateways.
// It reports usage errors itself; ok is false when the command should not go on, code then being
// 0 after --help and ExitUsage after a usage error.
func (c *command) parse(f common, args []string) (t target, code int, ok bool) {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.usage(true)
			return t, 0, false
		}
		fmt.Fprintln(c.stderr, "leasegate:", err)
		f.usage(false)
		return t, ExitUsage, false
	}
	if f.locks != nil { // elect has no --lock
		if err := f.target(&t); err != nil {
			fmt.Fprintln(c.stderr, "leasegate:", err)
			f.usage(false)
			return t, ExitUsage, false
		}
	}
	opts, err := c.clientOptions(f)
	if err != nil {
		fmt.Fprintln(c.stderr, "leasegate:", err)
		return t, ExitUsage, false
	}
	for _, server := range strings.Split(*f.server, ",") {
		server = strings.TrimSpace(server)
		if !strings.Contains(server, "://") {
			server = "http://" + server // host:port, as etcdctl and consul accept it
		}
		gw, err := leasegate.New(server, opts...)
		if err != nil {
			fmt.Fprintf(c.stderr, "leasegate: --server %q: %v\n", server, err)
			return t, ExitUsage, false
		}
		c.gateways = append(c.gateways, gw)
	}
	return t, 0, true
}

// target checks the parsed --lock, --semaphore, --multilock, --permits, --shared and --mode and
// sets t from them, or says what is wrong with them.
func (f common) target(t *target) error {
	locks := *f.locks
	if len(locks) == 1 && locks[0] == "" {
		locks = nil // as if not given
	}
	multilock := f.multilock != nil && *f.multilock != ""
	election := f.election != nil && *f.election != ""
	switch {
	case len(locks) == 0 && *f.semaphore == "" && !multilock && !election:
		switch {
		case f.takes:
			return errors.New("--lock is required, or --semaphore with --permits")
		case f.multilock != nil:
			return errors.New("--lock is required, or --semaphore, or --multilock")
		case f.election != nil:
			return errors.New("--lock is required, or --semaphore, or --election")
		}
		return errors.New("--lock is required, or --semaphore")
	case len(locks) > 0 && *f.semaphore != "":
		return errors.New("--lock and --semaphore exclude each other: give one")
	case multilock && (len(locks) > 0 || *f.semaphore != ""):
		return errors.New("--multilock excludes --lock and --semaphore: give one")
	case election && (len(locks) > 0 || *f.semaphore != ""):
		return errors.New("--election excludes --lock and --semaphore: give one")
	}
	permitsSet := isSet(f.fs, "permits")
	if election {
		if permitsSet {
			return errors.New("--permits goes with --semaphore, not --election")
		}
		t.election = *f.election
		return nil
	}
	if multilock {
		switch {
		case permitsSet:
			return errors.New("--permits goes with --semaphore, not --multilock")
		case f.mode != nil && *f.mode != "":
			return errors.New("--mode is for locks: a multi-lock is given back whole")
		}
		t.multilock = *f.multilock
		return nil
	}
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
	if err := f.members(locks); err != nil {
		return err
	}
	if len(locks) == 1 {
		t.lock = locks[0]
	} else {
		t.locks = locks
	}
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

// members checks the --lock names: several are a multi-lock's members where a hold is taken,
// else a mistake.
func (f common) members(locks []string) error {
	switch {
	case len(locks) == 1:
		return nil
	case !f.takes && f.multilock != nil:
		return errors.New("give one --lock: a multi-lock's locks are renewed and given back together, with --multilock ID (its grant's \"id\")")
	case !f.takes:
		return fmt.Errorf("give one --lock: %s a multi-lock's locks one by one", f.name)
	case len(locks) > maxMembers:
		return fmt.Errorf("at most %d --lock make one multi-lock, got %d", maxMembers, len(locks))
	}
	seen := make(map[string]bool, len(locks))
	for _, name := range locks {
		if name == "" {
			return errors.New("--lock needs a name")
		}
		if seen[name] {
			return fmt.Errorf("--lock %q given twice", name)
		}
		seen[name] = true
	}
	return nil
}

// usageError reports a usage error found after the flags were parsed and returns ExitUsage.
func (c *command) usageError(f common, msg string) int {
	fmt.Fprintln(c.stderr, "leasegate:", msg)
	f.usage(false)
	return ExitUsage
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
	fmt.Fprintln(c.stderr, "leasegate:", c.explain(err))
	if notAcquired(err) {
		return ExitNotAcquired
	}
	return ExitFailed
}

// durationFlag is a duration flag in Go syntax ("30s").
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	return fs.Duration(name, def, usage+" (Go duration, e.g. 30s)")
}
