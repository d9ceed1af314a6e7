// Command provider-agent runs the provider agent and its operator tools.
//
// main is thin: it picks the subcommand, hands it the arguments, and maps its
// error to an exit code. Each subcommand lives in its own file and registers
// itself with register in an init function.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"provideragent/backend"
	"provideragent/config"
)

// command is one subcommand of provider-agent.
type command struct {
	name    string // e.g. "run" or "courier"
	summary string // one line for the top-level help
	// run executes the command. args excludes the command name. A *usageError
	// exits 2; any other error exits 1.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

// register adds a subcommand; called from init functions.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("provider-agent: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// usageError marks a bad command line: it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	// A workload supervisor the process backend started (this binary
	// re-executed): it never returns.
	backend.RunShimIfRequested()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// runMain dispatches args to a subcommand and returns the exit code.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return exitCode(c.run(ctx, []string{"--help"}, stdout, stderr), stderr)
			}
		}
		printTopUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		return exitCode(runVersion(ctx, args[1:], stdout, stderr), stderr)
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "provider-agent: unknown command %q (run 'provider-agent --help' for the list)\n", args[0])
		return 2
	}
	return exitCode(c.run(ctx, args[1:], stdout, stderr), stderr)
}

// exitConfig is the exit status of an invalid configuration (a config
// file that is missing or does not parse, a bad key, environment variable
// or flag value): sysexits.h's EX_CONFIG. Restarting cannot fix it, so the
// systemd units name it in RestartPreventExitStatus= instead of
// restarting every RestartSec for ever.
const exitConfig = 78

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "provider-agent: %v\n", err)
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		return 2
	case errors.Is(err, config.ErrInvalid):
		return exitConfig
	}
	return 1
}

func printTopUsage(w io.Writer) {
	fmt.Fprintln(w, `provider-agent keeps a compute provider's workloads single-writer across relay
outages, node failures and restarts, using M-of-N Nostr relays for coordination.

Usage: provider-agent <command> [flags] [args]

Commands:`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, `
Run 'provider-agent <command> --help' for a command's flags and an example;
'provider-agent --version' prints the build.`)
}

// newFlagSet returns a FlagSet that prints usage (with the given text and an
// example) to stdout on --help and returns errors instead of exiting.
func newFlagSet(name, usage string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("provider-agent "+name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintln(stdout, usage)
		fmt.Fprintln(stdout, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses the flags at the start of args and stops at the first
// positional argument (a command that dispatches to subcommands: the rest,
// fs.Args(), is the subcommand's). A bad flag becomes a usage error and
// --help returns flag.ErrHelp (exit 0). Leaf commands use parseArgs.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{msg: err.Error()}
	}
	return nil
}

// parseArgs is the one parser of every command's own arguments: flags may
// come before, between and after the positional arguments (so
// 'workloads show ID --config F' works as 'workloads show --config F ID'),
// and "--" ends the flags. It returns the positional arguments and checks
// their number against want (wantAny: any number); what names them in the
// usage error ("one workload ID").
func parseArgs(fs *flag.FlagSet, args []string, want int, what string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		consumed := len(args) - len(fs.Args())
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, fs.Args()...)
			break
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	switch {
	case want == wantAny || len(pos) == want:
		return pos, nil
	case want == 0:
		return nil, usagef("%s: unexpected argument %q", strings.TrimPrefix(fs.Name(), "provider-agent "), pos[0])
	}
	return nil, usagef("%s: want %s, got %d arguments", strings.TrimPrefix(fs.Name(), "provider-agent "), what, len(pos))
}

// wantAny tells parseArgs to accept any number of positional arguments.
const wantAny = -1
