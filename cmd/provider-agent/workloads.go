package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/checkpoint"
	"provideragent/config"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/imagespec"
	"provideragent/lease"
	"provideragent/relay"
)

func init() {
	register(command{
		name:    "workloads",
		summary: "list, show, grant (local operator lease) and release workloads",
		run:     workloadsGroup.run,
	})
}

const workloadsUsage = `provider-agent workloads [--config F | --data-dir D | --db PATH] <subcommand> [flags] [args]

Manages the workloads in the agent's database. grant queues a local operator
lease and release queues the stop-and-forget of a workload; a running agent
applies them within a second, a stopped one when it starts. Flags may come
before or after the subcommand's arguments.

  workloads list                 every workload: state, epoch, holder, standbys
  workloads show ID              one workload's full persisted state (JSON), with
                                 the standbys left and why its process last ended
  workloads grant --id ID [--primary KEY] [--standby KEY]... --command 'LINE'
                                 [--replication warm-standby|checkpointed|none]
                                 [--restart never|on-failure] [--max-attempts N]
                                 [--publish]
                                 [--checkpoint] [--checkpoint-server URL]...
                                 [--checkpoint-min-servers K]
                                 [--restore best-effort|required] [--restore-timeout D]
  workloads grant --id ID ... --image REF [--command 'LINE'] [--cpus N]
                                 [--memory-mb N] [--env KEY=VALUE]... [--network]
                                 an OCI image (backend.kind = podman); LINE runs
                                 in it with /bin/sh -c, else its own command
  workloads release ID           stop the workload here and forget it
  workloads move ID [--to KEY] [--wait]
                                 planned handover of a durable workload held
                                 here: SIGTERM it, publish the checkpoint it
                                 writes on exit, then revoke naming it, so a
                                 standby (--to: that one) resumes exactly there
  workloads drain [--undo] [--wait]
                                 node maintenance: claim and take over nothing,
                                 and move every durable workload held here
                                 (others are listed and left running); --undo
                                 ends it. --wait returns once every workload
                                 it moves is held by its successor (this node
                                 hears the successor's heartbeats list it at
                                 the new epoch), exit 1 if a move gave up

Keys are hex or npub; --primary defaults to this agent's own key. grant
creates the database (and the data dir, mode 0700) when missing.

A grant names the relays and quorum it is judged over, which must be those
the agent runs with (it refuses any other: lease relay set mismatch). They
come from --config (the agent's file), --relay and --quorum, or
PROVIDER_AGENT_LEASE_*; with none of these, from <data_dir>/lease-settings.json,
which run writes at start. With none of these and no run yet on the data
dir, grant refuses and says so. A grant that names other relays than the
running agent's is refused; than those of an agent that is not running,
warned about.

How standbys learn a workload: a grant is local to this agent's database
until it is published. --publish signs it with this agent's key file (the
issuer) and publishes it (kind 38388) to the configured relays; every
provider it names picks it up only if it lists the issuer's key in its own
agent.trusted_issuers. A grant with --standby but without --publish never
reaches the standbys: grant warns about it.

A durable workload (--checkpoint, or any --checkpoint-*/--restore flag)
keeps its state across a failover: the holder publishes every new
$PROVIDER_AGENT_CHECKPOINT_DIR/checkpoint to the Blossom servers (the
--checkpoint-server ones, else each provider's uploader.servers) and a
signed record of it to the relays; a new holder restores the newest one
before it starts the workload. --restore says what happens when it cannot
be fetched within --restore-timeout: best-effort (the default) starts
fresh, required keeps trying until provision_timeout. The grant carries a
new checkpoint key, sealed to each member with the key file (NIP-44):
checkpoints are stored on the servers encrypted with it, readable by the
lease's members only; granting again makes a new key.

` + agentFilesHelp + `

Example:
  provider-agent workloads grant --data-dir ./data --id web-1 --command 'python3 -m http.server 8080' \
      --standby npub1... --replication warm-standby --publish
  provider-agent workloads grant --data-dir ./data --id web-2 --image docker.io/library/nginx:1.27 \
      --memory-mb 256 --cpus 0.5 --env NGINX_PORT=8080 --network
  provider-agent workloads list --data-dir ./data
  provider-agent workloads show web-1 --config /etc/provider-agent.toml`

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

var workloadsGroup = group{name: "workloads", usage: workloadsUsage, subs: []sub{
	{"list", runWorkloadsList}, {"show", runWorkloadsShow}, {"grant", runWorkloadsGrant}, {"release", runWorkloadsRelease},
	{"move", runWorkloadsMove}, {"drain", runWorkloadsDrain},
}}

// openAgentDB opens the agent's database with the agent's migrations
// applied; only create (grant) makes a missing one.
func openAgentDB(ctx context.Context, files *agentFiles, create bool) (*sql.DB, string, error) {
	return files.openDBWith(ctx, create, agent.Migrate)
}

func runWorkloadsList(ctx context.Context, files *agentFiles, args []string, stdout, _ io.Writer) error {
	fs, sub := subFlags("workloads list", workloadsUsage, files, stdout)
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	cfg, err := sub.config()
	if err != nil {
		return err
	}
	db, _, err := openAgentDB(ctx, sub, false)
	if err != nil {
		return fmt.Errorf("workloads list: %w", err)
	}
	defer db.Close()
	st, err := statusFromDB(ctx, db, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st.Workloads)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSTATE\tEPOCH\tHOLDER\tSTANDBYS")
	for _, w := range st.Workloads {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", w.ID, w.State, w.Epoch, shortKey(w.Primary), standbysColumn(w))
	}
	tw.Flush()
	printWorkloadNotes(stdout, st.Workloads)
	cmds, err := agent.ListCommands(ctx, db, true)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		fmt.Fprintf(stdout, "pending: %s %s (queued %s)\n", c.Action, c.Workload, c.CreatedAt.Format(time.RFC3339))
	}
	return nil
}

// workloadShow is 'workloads show': the persisted state, and what an
// operator needs beside it.
type workloadShow struct {
	lease.WorkloadSnapshot
	// StandbysLeft are the standbys that can still take the workload over
	// (the lease's without the current holder).
	StandbysLeft []string `json:"standbys_left"`
	NoStandby    bool     `json:"no_standby,omitempty"`
	// Reason says why the process last ended (failed or respawning).
	Reason string `json:"reason,omitempty"`
	// Log is the workload's output file.
	Log string `json:"log"`
}

func runWorkloadsShow(ctx context.Context, files *agentFiles, args []string, stdout, _ io.Writer) error {
	fs, sub := subFlags("workloads show", workloadsUsage, files, stdout)
	pos, err := parseArgs(fs, args, 1, "one workload ID")
	if err != nil {
		return err
	}
	cfg, err := sub.config()
	if err != nil {
		return err
	}
	db, path, err := openAgentDB(ctx, sub, false)
	if err != nil {
		return fmt.Errorf("workloads show: %w", err)
	}
	defer db.Close()
	ws, err := agent.LoadWorkloads(ctx, db)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if w.Spec.ID != pos[0] {
			continue
		}
		view := agent.WorkloadView(w, "")
		out := workloadShow{WorkloadSnapshot: w, StandbysLeft: view.Standbys, NoStandby: view.NoStandby,
			Log: backend.LogFile(cfg.BackendLogDir(), w.Spec.ID)}
		if agent.NeedsReason(w.State) {
			out.Reason = backend.ExitReason(out.Log)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	cmds, err := agent.ListCommands(ctx, db, true)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if c.Workload == pos[0] && c.Action == "grant" {
			return fmt.Errorf("workloads show: no workload %q in %s yet: a grant of it is queued (%s); a running agent applies it within a second",
				pos[0], path, c.CreatedAt.Format(time.RFC3339))
		}
	}
	return fmt.Errorf("workloads show: no workload %q in %s", pos[0], path)
}

func runWorkloadsGrant(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("workloads grant", workloadsUsage, files, stdout)
	var (
		id, primary, command, replication, restart string
		maxAttempts                                int
		epoch                                      uint64
		standbys, env                              stringList
		publish                                    bool
		im                                         imagespec.Image
		durable                                    bool
		ckptServers                                stringList
		ckptMin                                    int
		restoreMode                                string
		restoreTimeout                             time.Duration
	)
	fs.StringVar(&id, "id", "", "workload `id` (required)")
	fs.StringVar(&primary, "primary", "", "primary provider `key` (hex or npub; default: this agent)")
	fs.Var(&standbys, "standby", "standby provider `key` (repeat, in rank order); standbys learn the workload only with --publish")
	fs.StringVar(&command, "command", "", "shell command `line` that runs the workload (required without --image; with it, run in the image with /bin/sh -c)")
	fs.StringVar(&im.Ref, "image", "", "OCI image `ref` to run instead of a command (backend.kind = podman), e.g. docker.io/library/nginx:1.27")
	fs.Float64Var(&im.CPUs, "cpus", 0, "--image: CPU limit in cores (0: none)")
	fs.Int64Var(&im.MemoryMB, "memory-mb", 0, "--image: memory limit in MiB (0: none)")
	fs.Var(&env, "env", "--image: `KEY=VALUE` added to the container's environment (repeat)")
	fs.BoolVar(&im.Network, "network", false, "--image: give the container the host's default container network (default: none)")
	fs.StringVar(&replication, "replication", "", "none, checkpointed or warm-standby (default: warm-standby with standbys, none without)")
	fs.StringVar(&restart, "restart", "on-failure", "restart policy: never or on-failure")
	fs.IntVar(&maxAttempts, "max-attempts", 5, "respawn attempts for on-failure")
	fs.Uint64Var(&epoch, "epoch", 1, "starting epoch")
	fs.BoolVar(&publish, "publish", false, "also sign the grant with the key file (as issuer) and publish it (kind 38388) to the relays, so that every named provider that trusts this key picks it up")
	fs.BoolVar(&durable, "checkpoint", false, "durable workload: publish its checkpoints and restore the newest before a new holder starts it")
	fs.Var(&ckptServers, "checkpoint-server", "Blossom server `URL` for its checkpoints (repeat; default: each provider's uploader.servers)")
	fs.IntVar(&ckptMin, "checkpoint-min-servers", 0, "K: a checkpoint counts once on this many servers (0: all)")
	fs.StringVar(&restoreMode, "restore", "", "best-effort (default) or required: what a new holder does when no checkpoint can be fetched in time")
	fs.DurationVar(&restoreTimeout, "restore-timeout", 0, "bound of one restore attempt (0: 60s)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	cfg, err := sub.config()
	if err != nil {
		return err
	}
	im.Env = env
	spec, err := grantSpec(cfg, id, primary, standbys, command, im, replication, restart, maxAttempts, epoch)
	if err != nil {
		return err
	}
	// The relays and quorum the agent runs with, not the built-in ones.
	if err := grantLease(&cfg, sub.leaseGiven(), stderr); err != nil {
		return err
	}
	spec.Relays, spec.Quorum = cfg.Lease.Relays, cfg.Lease.Quorum
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("workloads grant: %w", err)
	}
	if durable || len(ckptServers) > 0 || ckptMin != 0 || restoreMode != "" || restoreTimeout != 0 {
		spec.Checkpoint = &lease.CheckpointPolicy{Servers: ckptServers, MinServers: ckptMin,
			Restore: lease.RestoreMode(restoreMode), RestoreTimeout: restoreTimeout}
		if spec.Checkpoint.Keys, err = grantCheckpointKey(cfg, spec); err != nil {
			return err
		}
		if err := spec.Validate(); err != nil {
			return fmt.Errorf("workloads grant: %w", err)
		}
	}
	db, _, err := openAgentDB(ctx, sub, true)
	if err != nil {
		return fmt.Errorf("workloads grant: %w", err)
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
	if len(spec.Standbys) > 0 {
		issuer := "this agent's key (see 'provider-agent keygen')"
		if sk, err := config.LoadKeyFile(cfg.KeyFilePath()); err == nil {
			if pub, err := identity.PublicKeyOf(sk); err == nil {
				if npub, err := identity.EncodeNpub(pub); err == nil {
					issuer = npub
				}
			}
		}
		fmt.Fprintf(stderr, "provider-agent: warning: %s names %d standbys, but the grant is only in this agent's database: "+
			"standbys learn a workload only from a published grant. Run the grant again with --publish (it is signed with "+
			"this agent's key file as issuer, %s), and list that key in agent.trusted_issuers on every standby.\n",
			spec.ID, len(spec.Standbys), issuer)
	}
	return nil
}

// grantCheckpointKey makes the grant's checkpoint key and seals it to
// each member of spec with the key file (the grant's issuer: it signs the
// published grant, and is this agent for a local one): checkpoints are
// stored sealed with it, readable by the members only.
func grantCheckpointKey(cfg config.Config, spec lease.Spec) (map[string]string, error) {
	secret, err := config.LoadKeyFile(cfg.KeyFilePath())
	if err != nil {
		return nil, fmt.Errorf("workloads grant: the checkpoint key is sealed to the members with the key file: %w", err)
	}
	issuer, err := identity.NewKeys(secret)
	if err != nil {
		return nil, fmt.Errorf("workloads grant: %w", err)
	}
	keys, err := checkpoint.NewGrantKey(issuer, checkpoint.GrantMembers(spec.Primary, spec.Standbys))
	if err != nil {
		return nil, fmt.Errorf("workloads grant: %w", err)
	}
	return keys, nil
}

func runWorkloadsRelease(ctx context.Context, files *agentFiles, args []string, stdout, _ io.Writer) error {
	fs, sub := subFlags("workloads release", workloadsUsage, files, stdout)
	pos, err := parseArgs(fs, args, 1, "one workload ID")
	if err != nil {
		return err
	}
	db, _, err := openAgentDB(ctx, sub, false)
	if err != nil {
		return fmt.Errorf("workloads release: %w", err)
	}
	defer db.Close()
	seq, err := agent.QueueRelease(ctx, db, pos[0], time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "queued release #%d of %s\n", seq, pos[0])
	return nil
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
	keys, err := identity.NewKeys(secret)
	if err != nil {
		return fmt.Errorf("workloads grant --publish: %w", err)
	}
	ev, err := heartbeat.BuildLeaseGrant(keys, heartbeat.LeaseGrantParams{
		WorkloadID: spec.ID, Primary: spec.Primary, Standbys: spec.Standbys, Relays: cfg.Lease.Relays,
		Quorum: cfg.Lease.Quorum, Replication: spec.Replication, RestartPolicy: spec.RestartPolicy,
		Command: spec.Command, Epoch: spec.Epoch, Checkpoint: spec.Checkpoint, StateURI: spec.StateURI,
		// The local grant's time: checkpoint records name the grant by it.
		At: spec.CreatedAt,
	})
	if err != nil {
		return fmt.Errorf("workloads grant --publish: %w", err)
	}
	pool, err := relay.New(relayConfig(cfg), relay.Options{SecretKey: secret})
	if err != nil {
		return fmt.Errorf("workloads grant --publish: %w", err)
	}
	defer pool.Close()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// Give the supervisors a moment to connect before publishing.
	waitForRelays(pctx, cfg.Lease.Quorum, pool.Connected)
	res := pool.Publish(pctx, *ev)
	fmt.Fprintf(stdout, "published grant %s (issuer %s): accepted by %d of %d relays\n", ev.ID, keys.Npub(), res.AcceptedCount(), len(cfg.Lease.Relays))
	if res.AcceptedCount() < cfg.Lease.Quorum {
		return fmt.Errorf("workloads grant --publish: only %d relays accepted, quorum is %d", res.AcceptedCount(), cfg.Lease.Quorum)
	}
	return nil
}

func grantSpec(cfg config.Config, id, primary string, standbys []string, command string, im imagespec.Image, replication, restart string, maxAttempts int, epoch uint64) (lease.Spec, error) {
	if id == "" {
		return lease.Spec{}, usagef("workloads grant: --id is required")
	}
	if im.Ref == "" && strings.TrimSpace(command) == "" {
		return lease.Spec{}, usagef("workloads grant: --command (or --image) is required")
	}
	if im.Ref == "" && (im.CPUs != 0 || im.MemoryMB != 0 || len(im.Env) > 0 || im.Network) {
		return lease.Spec{}, usagef("workloads grant: --cpus, --memory-mb, --env and --network apply to --image")
	}
	argv := backend.ShellCommand(command)
	if im.Ref != "" {
		if err := im.Validate(); err != nil {
			return lease.Spec{}, fmt.Errorf("workloads grant: --image: %w", err)
		}
		if strings.TrimSpace(command) == "" {
			argv = nil
		}
		argv = imagespec.Encode(im, argv)
	}
	if primary == "" {
		secret, err := config.LoadKeyFile(cfg.KeyFilePath())
		if err != nil {
			return lease.Spec{}, fmt.Errorf("workloads grant: --primary not given and %w", err)
		}
		if primary, err = identity.PublicKeyOf(secret); err != nil {
			return lease.Spec{}, err
		}
	}
	p, err := identity.ParsePublicKey(primary)
	if err != nil {
		return lease.Spec{}, fmt.Errorf("workloads grant: --primary: %w", err)
	}
	spec := lease.Spec{ID: id, Primary: p, Epoch: epoch, Command: argv, CreatedAt: time.Now().UTC()}
	for i, s := range standbys {
		k, err := identity.ParsePublicKey(s)
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

// waitForRelays waits until at least need relays are connected or ctx
// ends: a publish goes only to connected relays.
func waitForRelays(ctx context.Context, need int, connected func() int) {
	for ctx.Err() == nil && connected() < need {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// relayConfig is the relay pool of a CLI command that publishes for the
// agent: the agent's own (agent.Config.RelayConfig), on the lease's relays
// dialled as lease.dial_addrs says.
func relayConfig(cfg config.Config) relay.Config { return cfg.AgentConfig("").RelayConfig() }

func runWorkloadsMove(ctx context.Context, files *agentFiles, args []string, stdout, _ io.Writer) error {
	fs, sub := subFlags("workloads move", workloadsUsage, files, stdout)
	var to string
	var wait bool
	fs.StringVar(&to, "to", "", "the standby `key` to hand over to (hex or npub; default: the first standby alive)")
	fs.BoolVar(&wait, "wait", false, "wait until the running agent moved it (or gave up) and print the outcome")
	pos, err := parseArgs(fs, args, 1, "one workload ID")
	if err != nil {
		return err
	}
	if to != "" {
		if to, err = identity.ParsePublicKey(to); err != nil {
			return fmt.Errorf("workloads move: --to: %w", err)
		}
	}
	db, _, err := openAgentDB(ctx, sub, false)
	if err != nil {
		return fmt.Errorf("workloads move: %w", err)
	}
	defer db.Close()
	seq, err := agent.QueueMove(ctx, db, pos[0], to, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "queued move #%d of %s\n", seq, pos[0])
	if !wait {
		return nil
	}
	for {
		cmds, err := agent.ListCommands(ctx, db, false)
		if err != nil {
			return fmt.Errorf("workloads move: %w", err)
		}
		for _, c := range cmds {
			if c.Seq != seq || c.Result == "" || c.Result == "moving" {
				continue
			}
			fmt.Fprintf(stdout, "%s: %s\n", pos[0], c.Result)
			if !strings.HasPrefix(c.Result, "moved") {
				return fmt.Errorf("workloads move %s: %s", pos[0], c.Result)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func runWorkloadsDrain(ctx context.Context, files *agentFiles, args []string, stdout, _ io.Writer) error {
	fs, sub := subFlags("workloads drain", workloadsUsage, files, stdout)
	undo := fs.Bool("undo", false, "end the drain: claim and take over again")
	wait := fs.Bool("wait", false, "wait until the running agent applied it and every durable workload it moves is held by its successor; print what it did")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	db, path, err := openAgentDB(ctx, sub, false)
	if err != nil {
		return fmt.Errorf("workloads drain: %w", err)
	}
	defer db.Close()
	seq, err := agent.QueueDrain(ctx, db, !*undo, time.Now())
	if err != nil {
		return err
	}
	what := "drain"
	if *undo {
		what = "undrain"
	}
	fmt.Fprintf(stdout, "queued %s #%d\n", what, seq)
	if !*wait {
		return nil
	}
	return waitDrain(ctx, db, filepath.Dir(path), seq, stdout)
}

// waitDrain waits for drain command seq: until the agent applied it, then
// (a drain that moves workloads) until its result says every move is over
// (agent.DrainedPrefix). It prints each result; a move that did not end
// with the workload held by its successor makes it fail. It gives up when
// the run that applied the command stops (the moves end with it: run
// drain again once the agent is back).
func waitDrain(ctx context.Context, db *sql.DB, dataDir string, seq int64, stdout io.Writer) error {
	var holder, printed string
	for {
		cmds, err := agent.ListCommands(ctx, db, false)
		if err != nil {
			return fmt.Errorf("workloads drain: %w", err)
		}
		for _, c := range cmds {
			if c.Seq != seq || c.AppliedAt.IsZero() {
				continue
			}
			if c.Result != printed {
				fmt.Fprintln(stdout, c.Result)
				printed = c.Result
			}
			if !strings.HasPrefix(c.Result, agent.DrainingPrefix) {
				if !agent.DrainMovedAll(c.Result) {
					return fmt.Errorf("workloads drain: not every durable workload was moved")
				}
				return nil
			}
		}
		var held *dataDirLockedError
		switch {
		case !errors.As(dataDirHeld(dataDir), &held):
			if printed != "" || holder != "" {
				return fmt.Errorf("workloads drain: the agent on %s stopped before the drain's moves ended: run workloads drain again once it runs", dataDir)
			}
		case holder == "":
			holder = held.holder
		case held.holder != holder:
			return fmt.Errorf("workloads drain: the agent on %s restarted (pid %s, was %s) before the drain's moves ended: run workloads drain again", dataDir, held.holder, holder)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
