package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"provideragent/agent"
	"provideragent/agent/backend"
	"provideragent/agent/config"
	"provideragent/agent/relay"
	"provideragent/heartbeat"
	"provideragent/lease"
)

func init() {
	register(command{
		name:    "workloads",
		summary: "list, show, grant (local operator lease) and release workloads",
		run:     runWorkloads,
	})
}

const workloadsUsage = `provider-agent workloads list|show|grant|release manages the workloads in the
agent's database. grant queues a local operator lease and release queues the
stop-and-forget of a workload; a running agent applies them within a second,
a stopped one when it starts.

  workloads list                 every workload: state, epoch, holder
  workloads show ID              one workload's full persisted state (JSON)
  workloads grant --id ID --primary KEY [--standby KEY]... --command 'LINE'
                                 [--replication warm-standby|checkpointed|none]
                                 [--restart never|on-failure] [--max-attempts N]
                                 [--publish]  also sign it with this agent's key file (as issuer)
                                 and publish it (kind 38388) to the configured relays, so that
                                 every named provider that trusts this key picks it up
  workloads release ID           stop the workload here and forget it

Keys are hex or npub; --primary defaults to this agent's own key.

Example:
  provider-agent workloads grant --data-dir ./data --id web-1 --command 'python3 -m http.server 8080' \
      --standby npub1... --replication warm-standby
  provider-agent workloads list --data-dir ./data`

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runWorkloads(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, workloadsUsage)
		if len(args) == 0 {
			return usagef("workloads: want list, show, grant or release")
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	fs := newFlagSet("workloads "+sub, workloadsUsage, stdout)
	flags := config.BindFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON (list)")
	var (
		id, primary, command, replication, restart string
		maxAttempts                                int
		epoch                                      uint64
		standbys                                   stringList
		publish                                    bool
	)
	if sub == "grant" {
		fs.StringVar(&id, "id", "", "workload `id` (required)")
		fs.StringVar(&primary, "primary", "", "primary provider `key` (hex or npub; default: this agent)")
		fs.Var(&standbys, "standby", "standby provider `key` (repeat, in rank order)")
		fs.StringVar(&command, "command", "", "shell command `line` that runs the workload (required)")
		fs.StringVar(&replication, "replication", "", "none, checkpointed or warm-standby (default: warm-standby with standbys, none without)")
		fs.StringVar(&restart, "restart", "on-failure", "restart policy: never or on-failure")
		fs.IntVar(&maxAttempts, "max-attempts", 5, "respawn attempts for on-failure")
		fs.Uint64Var(&epoch, "epoch", 1, "starting epoch")
		fs.BoolVar(&publish, "publish", false, "also publish the grant, signed with the key file, to the relays")
	}
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	cfg, err := loadConfigLoose(flags)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		db, err := openExistingDB(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close()
		st, err := statusFromDB(ctx, db)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st.Workloads)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKLOAD\tSTATE\tEPOCH\tHOLDER")
		for _, w := range st.Workloads {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", w.ID, w.State, w.Epoch, shortKey(w.Primary))
		}
		tw.Flush()
		cmds, err := agent.ListCommands(ctx, db, true)
		if err != nil {
			return err
		}
		for _, c := range cmds {
			fmt.Fprintf(stdout, "pending: %s %s (queued %s)\n", c.Action, c.Workload, c.CreatedAt.Format(time.RFC3339))
		}
		return nil
	case "show":
		if fs.NArg() != 1 {
			return usagef("workloads show: want one workload id")
		}
		db, err := openExistingDB(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close()
		ws, err := agent.LoadWorkloads(ctx, db)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if w.Spec.ID == fs.Arg(0) {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(w)
			}
		}
		return fmt.Errorf("workloads show: no workload %q in %s", fs.Arg(0), cfg.DBPath())
	case "grant":
		if fs.NArg() > 0 {
			return usagef("workloads grant: unexpected argument %q", fs.Arg(0))
		}
		spec, err := grantSpec(cfg, id, primary, standbys, command, replication, restart, maxAttempts, epoch)
		if err != nil {
			return err
		}
		db, err := openOrCreateDB(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close()
		seq, err := agent.QueueGrant(ctx, db, spec, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "queued grant #%d of %s (primary %s, %d standbys, epoch %d)\n", seq, spec.ID, shortKey(spec.Primary), len(spec.Standbys), spec.Epoch)
		if publish {
			return publishGrant(ctx, cfg, spec, stdout)
		}
		return nil
	case "release":
		if fs.NArg() != 1 {
			return usagef("workloads release: want one workload id")
		}
		db, err := openExistingDB(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close()
		seq, err := agent.QueueRelease(ctx, db, fs.Arg(0), time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "queued release #%d of %s\n", seq, fs.Arg(0))
		return nil
	}
	return usagef("workloads: unknown subcommand %q (want list, show, grant or release)", sub)
}

// publishGrant signs spec as a kind 38388 lease grant with the key file and
// publishes it to the configured relays; it needs a quorum of OK true.
func publishGrant(ctx context.Context, cfg config.Config, spec lease.Spec, stdout io.Writer) error {
	if len(cfg.Lease.Relays) == 0 {
		return fmt.Errorf("workloads grant --publish: no relays configured (lease.relays or --relay)")
	}
	secret, err := config.LoadKeyFile(cfg.KeyFilePath())
	if err != nil {
		return fmt.Errorf("workloads grant --publish: %w", err)
	}
	keys, err := heartbeat.NewKeys(secret)
	if err != nil {
		return fmt.Errorf("workloads grant --publish: %w", err)
	}
	ev, err := heartbeat.BuildLeaseGrant(keys, heartbeat.LeaseGrantParams{
		WorkloadID: spec.ID, Primary: spec.Primary, Standbys: spec.Standbys, Relays: cfg.Lease.Relays,
		Quorum: cfg.Lease.Quorum, Replication: spec.Replication, RestartPolicy: spec.RestartPolicy,
		Command: spec.Command, Epoch: spec.Epoch, At: time.Now(),
	})
	if err != nil {
		return fmt.Errorf("workloads grant --publish: %w", err)
	}
	rc := relay.DefaultConfig()
	rc.URLs = cfg.Lease.Relays
	pool, err := relay.New(rc, relay.Options{SecretKey: secret})
	if err != nil {
		return fmt.Errorf("workloads grant --publish: %w", err)
	}
	defer pool.Close()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// Give the supervisors a moment to connect before publishing.
	for pctx.Err() == nil {
		up := 0
		for _, s := range pool.Status() {
			if s.Connected {
				up++
			}
		}
		if up >= cfg.Lease.Quorum {
			break
		}
		select {
		case <-pctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	res := pool.Publish(pctx, *ev)
	fmt.Fprintf(stdout, "published grant %s (issuer %s): accepted by %d of %d relays\n", ev.ID, keys.Npub(), res.AcceptedCount(), len(cfg.Lease.Relays))
	if res.AcceptedCount() < cfg.Lease.Quorum {
		return fmt.Errorf("workloads grant --publish: only %d relays accepted, quorum is %d", res.AcceptedCount(), cfg.Lease.Quorum)
	}
	return nil
}

func grantSpec(cfg config.Config, id, primary string, standbys []string, command, replication, restart string, maxAttempts int, epoch uint64) (lease.Spec, error) {
	if id == "" {
		return lease.Spec{}, usagef("workloads grant: --id is required")
	}
	if strings.TrimSpace(command) == "" {
		return lease.Spec{}, usagef("workloads grant: --command is required")
	}
	if primary == "" {
		secret, err := config.LoadKeyFile(cfg.KeyFilePath())
		if err != nil {
			return lease.Spec{}, fmt.Errorf("workloads grant: --primary not given and %w", err)
		}
		if primary, err = heartbeat.PublicKeyOf(secret); err != nil {
			return lease.Spec{}, err
		}
	}
	p, err := heartbeat.ParsePublicKey(primary)
	if err != nil {
		return lease.Spec{}, fmt.Errorf("workloads grant: --primary: %w", err)
	}
	spec := lease.Spec{ID: id, Primary: p, Epoch: epoch, Command: backend.ShellCommand(command), CreatedAt: time.Now().UTC()}
	for i, s := range standbys {
		k, err := heartbeat.ParsePublicKey(s)
		if err != nil {
			return lease.Spec{}, fmt.Errorf("workloads grant: --standby #%d: %w", i+1, err)
		}
		spec.Standbys = append(spec.Standbys, k)
	}
	switch {
	case replication != "":
		spec.Replication = lease.Replication(replication)
	case len(spec.Standbys) > 0:
		spec.Replication = lease.ReplicationWarmStandby
	default:
		spec.Replication = lease.ReplicationNone
	}
	spec.RestartPolicy = lease.RestartPolicy{Policy: lease.RestartKind(restart)}
	if spec.RestartPolicy.Policy == lease.RestartOnFailure {
		spec.RestartPolicy.MaxAttempts = maxAttempts
	}
	if len(cfg.Lease.Relays) > 0 {
		spec.Relays = cfg.Lease.Relays
		spec.Quorum = cfg.Lease.Quorum
	}
	if err := spec.Validate(); err != nil {
		return lease.Spec{}, fmt.Errorf("workloads grant: %w", err)
	}
	return spec, nil
}
