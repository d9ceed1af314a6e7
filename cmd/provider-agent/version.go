package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"provideragent/internal/buildinfo"
)

func init() {
	register(command{
		name:    "version",
		summary: "print the build: module version, commit, Go version, build tags",
		run:     runVersion,
	})
}

const versionUsage = `Usage: provider-agent version [--json]

Prints which build this binary is: the module version (a tag, or (devel)
for a build from a work tree), the VCS commit it was built from (+dirty
with uncommitted changes), the Go version and the build tags. The running
agent logs the same at start, serves it on /status ("version") and as the
provider_agent_build_info gauge on /metrics. 'provider-agent --version'
prints the same line.

Example:
  provider-agent version
  provider-agent version --json | jq -r .revision`

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("version", versionUsage, stdout)
	asJSON := fs.Bool("json", false, "print the build as a JSON object")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	in := buildinfo.Read()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	_, err := fmt.Fprintln(stdout, "provider-agent "+in.String())
	return err
}
