package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// subcommand runs one subcommand of a group. files holds the agent-file
// flags given to the group before the subcommand's name; the subcommand's
// own flags (subFlags) fall back to them.
type subcommand func(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error

// sub names a subcommand of a group.
type sub struct {
	name string
	run  subcommand
}

// group is a command made of subcommands (workloads, courier, courier dlq,
// tiles): the one way the CLI declares them.
type group struct {
	name  string // "workloads", "courier dlq"
	usage string // printed by --help, help and a missing subcommand
	subs  []sub  // in the order the usage lists them
}

// run is a top-level group's entry point: the agent-file flags, then the
// subcommand and its arguments.
func (g group) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(g.name, g.usage, stdout)
	files := bindAgentFiles(fs, nil)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return g.dispatch(ctx, files, fs.Args(), stdout, stderr)
}

// dispatch runs the subcommand args[0] with the rest of args.
func (g group) dispatch(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stdout, g.usage)
		return usagef("%s: missing subcommand (%s)", g.name, g.names())
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, g.usage)
		return flag.ErrHelp
	}
	for _, s := range g.subs {
		if s.name == args[0] {
			return s.run(ctx, files, args[1:], stdout, stderr)
		}
	}
	return usagef("%s: unknown subcommand %q (%s; run 'provider-agent %s --help')", g.name, args[0], g.names(), g.name)
}

// names lists the subcommands: "list, show, grant or release".
func (g group) names() string {
	ns := make([]string, len(g.subs))
	for i, s := range g.subs {
		ns[i] = s.name
	}
	if len(ns) < 2 {
		return strings.Join(ns, "")
	}
	return strings.Join(ns[:len(ns)-1], ", ") + " or " + ns[len(ns)-1]
}

// subFlags returns the flag set of the subcommand name ("courier dlq
// list") with the agent-file flags, falling back to those given to its
// group (parent).
func subFlags(name, usage string, parent *agentFiles, stdout io.Writer) (*flag.FlagSet, *agentFiles) {
	fs := newFlagSet(name, usage, stdout)
	return fs, bindAgentFiles(fs, parent)
}
