package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// againWait is how long each campaign of elect --again waits in line when --wait is not given;
// one that runs out campaigns again.
const againWait = time.Hour

// elect campaigns in an election and runs a command while leader, as run does under a lock: the
// command starts once elected (LEASEGATE_ELECTION, LEASEGATE_VALUE, LEASEGATE_TOKEN and
// LEASEGATE_FENCE in its environment), the lead is renewed every TTL/3, the command is stopped
// (SIGTERM, then SIGKILL after grace) before the lead's lease can lapse or once the lead is lost
// (a force release, an expiry: elect follows the election's events through the --server replicas),
// and elect resigns when the command exits, so that the next candidate in line is elected at
// once. Its exit codes are run's: the command's own, ExitLeaseLost after a loss, ExitNotAcquired
// when --wait ran out.
//
// With --again, elect campaigns again whenever the command has exited, whatever its code and
// whether the lead was lost or not, and when a campaign's wait runs out; it ends only on
// SIGINT or SIGTERM (passed on to a running command, whose code it then exits with), or on an
// error, whose code it exits with. With or without --again, SIGINT or SIGTERM while campaigning
// exits 128 + the signal's number, as shells report it.
func (c *command) elect(ctx context.Context, args []string) int {
	o, again, code, ok := c.parseElect(args)
	if !ok {
		return code
	}
	if code, ok := c.runnable(o.argv[0]); !ok {
		return code
	}
	// The signal that ends a campaign (ctx is cancelled by it) is the exit code's.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	g, err := startGuardian(c.stderr) // one for every term
	if err != nil {
		return c.fail(err)
	}
	defer g.close()
	for {
		start := time.Now()
		lead, err := c.holdOnAny(ctx, o)
		if err != nil {
			if again && notAcquired(err) && ctx.Err() == nil {
				continue // the wait ran out: campaign again, at the back of the line
			}
			if ctx.Err() != nil {
				// The signal that cancelled ctx reaches signals too, but not necessarily first.
				select {
				case sig := <-signals:
					fmt.Fprintf(c.stderr, "leasegate: %v while campaigning in %s\n", sig, o.t)
					return 128 + int(sig.(syscall.Signal))
				case <-time.After(time.Second): // ctx ended otherwise
				}
			}
			if notAcquired(err) {
				return c.notGranted(ctx, o.t, o.owner, waited(o.wait, start), err)
			}
			return c.fail(err)
		}
		code := c.runHolding(ctx, o, lead, g)
		if !again || ctx.Err() != nil {
			return code
		}
		how := fmt.Sprintf("the command exited with %d", code)
		if code == ExitLeaseLost {
			how = "the lead was lost and the command stopped"
		}
		fmt.Fprintf(c.stderr, "leasegate: %s; campaigning again in %s\n", how, o.t)
	}
}

// parseElect reads and checks elect's arguments and flags: NAME (before or after the flags),
// --value, and run's --owner, --ttl, --wait, --grace; when !ok, elect exits with code.
func (c *command) parseElect(args []string) (o runOptions, again bool, code int, ok bool) {
	f := c.flags("elect", "NAME --value V [--owner O] [--ttl D] [--wait D] [--grace D] [--watchdog] [--again] [--server URL] -- COMMAND [ARGS...]")
	value := f.fs.String("value", "", "what the leader announces, e.g. its address (required; may be empty: --value '')")
	owner := f.fs.String("owner", c.defaultOwner(), "who campaigns")
	ttl := durationFlag(f.fs, "ttl", 30*time.Second, "the lead's lease time to live; renewed every ttl/3")
	wait := durationFlag(f.fs, "wait", 0, "how long to wait in line to be elected (with --again, each campaign: default 1h, then again)")
	grace := durationFlag(f.fs, "grace", 10*time.Second, "how long the command may take to stop after SIGTERM; clipped to fit the TTL")
	watchdog := f.fs.Bool("watchdog", false, "let the gateway renew the lead too (elect still renews it, and stops the command by its own count)")
	againFlag := f.fs.Bool("again", false, "campaign again after the command exits or the lead is lost, until SIGINT or SIGTERM")
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	t, code, ok := c.parse(f, args)
	if !ok {
		return runOptions{}, false, code, false
	}
	rest := f.fs.Args()
	if name == "" && len(rest) > 0 && rest[0] != "--" {
		name, rest = rest[0], rest[1:] // NAME after the flags: the parse stopped at it
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
	}
	usage := func(msg string) (runOptions, bool, int, bool) {
		fmt.Fprintln(c.stderr, "leasegate:", msg)
		f.usage(false)
		return runOptions{}, false, ExitUsage, false
	}
	switch {
	case name == "":
		return usage("elect needs the election's NAME")
	case !isSet(f.fs, "value"):
		return usage("--value is required: what the leader announces (--value '' for nothing)")
	case len(rest) == 0:
		return usage("elect needs a command after --")
	}
	t.election, t.value, t.watchdog = name, *value, *watchdog
	o = runOptions{t: t, owner: *owner, ttl: *ttl, wait: *wait, grace: *grace, argv: rest}
	if !c.fitTimes(&o, isSet(f.fs, "grace")) {
		return runOptions{}, false, ExitUsage, false
	}
	if *againFlag && !isSet(f.fs, "wait") {
		o.wait = againWait
	}
	return o, *againFlag, 0, true
}
