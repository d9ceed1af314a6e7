package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"provideragent/config"
)

func init() {
	register(command{
		name:    "doctor",
		summary: "check a node before it joins a fleet: config, key, data dir, relays, clock, containment, isolation, podman, Blossom, disk",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return runDoctor(ctx, args, stdout, doctorEnv{now: time.Now, environ: os.Environ()})
		},
	})
}

const doctorUsage = `provider-agent doctor checks what a new node gets wrong before it joins a
fleet, with the settings run would use (--config, PROVIDER_AGENT_*, flags),
and prints one line per check:

  config       the config file, environment and flags are valid
  key file     the identity key exists, is a key, and is mode 0600
  data dir     the data dir (and backend.log_dir) is 0700 and writable
  relay        per relay: reachable, its NIP-11 limits, it takes an event
               signed with our key and answers a read, and a heartbeat beat
               of --workloads workloads fits its limits
  clock        this clock against the relays' (their HTTP Date header), by
               the agent's rule: within max(lease.max_skew/2, 2s)
  containment  the workload containment backend.containment asks for is
               available to this user here (PID namespace, cgroup)
  isolation    as which users workloads would run (a uid of their own, or
               backend.workload_user); fails when no workload could start
               (isolation needs root) or with backend.isolation = none
  podman       with backend.kind = podman: the podman binary, its OCI runtime
               and one throwaway container run with backend.podman_run_args
               and the backend's own options (its image, one static program
               that exits 0, is imported and removed again)
  blossom      per uploader.servers entry: reachable (HEAD /upload)
  disk         free space where the data dir is, at least --min-free-mib

It publishes one ephemeral event (kind 20385, which no relay stores and the
agent never reads) to test writes, and changes no file (the podman check's
image and container are removed again). It exits 0 only when
every check passes, 1 otherwise (a check that does not apply, such as
blossom without servers, is "skip" and passes). Run it as the user the agent
runs as: containment, isolation and file access depend on it.

Example:
  provider-agent doctor --config /etc/provider-agent/provider-agent.toml
  provider-agent doctor --data-dir ./data --relay wss://relay.damus.io --relay wss://nos.lol \
      --relay wss://relay.nostr.band --quorum 2 --workloads 5000
  provider-agent doctor --config /etc/provider-agent/provider-agent.toml --json | jq '.checks[] | select(.status == "fail")'`

// doctorEnv is what doctor takes from its process: the clock (tests move
// it) and the environment (PROVIDER_AGENT_*).
type doctorEnv struct {
	now     func() time.Time
	environ []string
}

// checkStatus is one check's verdict.
type checkStatus string

const (
	// checkOK: the check passed.
	checkOK checkStatus = "ok"
	// checkFail: the check failed; Detail says why and what to do.
	checkFail checkStatus = "fail"
	// checkSkip: the check does not apply (no Blossom servers), or could
	// not run because an earlier one failed (the config); not a failure
	// by itself.
	checkSkip checkStatus = "skip"
)

// checkResult is one line of doctor's report.
type checkResult struct {
	Check  string      `json:"check"`
	Target string      `json:"target,omitempty"` // a relay, a server, a path
	Status checkStatus `json:"status"`
	Detail string      `json:"detail"`
}

// doctorOptions are doctor's own flags.
type doctorOptions struct {
	timeout    time.Duration
	workloads  int
	minFreeMiB uint64
}

func runDoctor(ctx context.Context, args []string, stdout io.Writer, env doctorEnv) error {
	fs := newFlagSet("doctor", doctorUsage, stdout)
	flags := config.BindFlags(fs)
	asJSON := fs.Bool("json", false, "print the checks as one JSON object ({\"ok\":..., \"checks\":[...]}) instead of lines")
	var opts doctorOptions
	fs.DurationVar(&opts.timeout, "timeout", 10*time.Second, "how long the relay, clock and Blossom checks may take together")
	fs.IntVar(&opts.workloads, "workloads", 1000, "size the heartbeat check for this many held workloads `N`")
	fs.Uint64Var(&opts.minFreeMiB, "min-free-mib", 1024, "the disk check fails below this much free space (`MiB`)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if opts.timeout <= 0 {
		return usagef("doctor: --timeout = %v, want a positive duration", opts.timeout)
	}
	if opts.workloads < 0 {
		return usagef("doctor: --workloads = %d, want 0 or more", opts.workloads)
	}
	results := doctorChecks(ctx, flags, opts, env)
	var failed []string
	for _, r := range results {
		if r.Status == checkFail {
			failed = append(failed, strings.TrimSpace(r.Check+" "+r.Target))
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			OK     bool          `json:"ok"`
			Checks []checkResult `json:"checks"`
		}{len(failed) == 0, results}); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			fmt.Fprintln(stdout, r.line())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("doctor: %d of %d checks failed: %s", len(failed), len(results), strings.Join(failed, ", "))
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "doctor: all %d checks passed\n", len(results))
	}
	return nil
}

// line is the check as one line of text: "FAIL  relay        ws://...: why".
func (r checkResult) line() string {
	word := string(r.Status)
	if r.Status == checkFail {
		word = "FAIL"
	}
	detail := r.Detail
	if r.Target != "" {
		detail = r.Target + ": " + detail
	}
	return fmt.Sprintf("%-4s  %-11s  %s", word, r.Check, detail)
}
