package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/config"
	"provideragent/internal/buildinfo"
	"provideragent/internal/sdnotify"
	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
)

func init() {
	register(command{
		name:    "run",
		summary: "run the agent daemon (relays, lease machine, workloads, /metrics /healthz /status)",
		run:     runRun,
	})
}

const runUsage = `provider-agent run starts the agent daemon: it connects to the lease's relays,
publishes this provider's heartbeats, drives the lease machine for every
workload it is named in, runs and fences the workload processes, and serves
/metrics, /healthz and /status (default on 127.0.0.1:9464). It stops cleanly on
SIGINT or SIGTERM.

Workload processes never outlive the agent: each runs under a supervisor
(this binary, re-executed) that kills the workload's whole process tree when
the agent dies, even by kill -9. The kernel holds that tree together
(backend.containment): the supervisor is the init of the workload's PID
namespace, so nothing of the workload survives the supervisor either, and
each workload has a cgroup that is killed whole; where the host allows
neither (not root, no user namespaces, no cgroup the agent may write) run
says so in a WARN and on /status. run holds <data_dir>/provider-agent.lock
for its whole life, so a second run on the same data dir exits 1 naming the
holder's pid; right after taking it, before opening the database, it kills
what a killed earlier run on this data dir left (its workloads' cgroups,
and processes with its tag; with backend.kind = podman, its containers,
by label). A data dir open to group or others is a WARN.

Workloads are isolated (backend.isolation = user, the default): each runs
as an unprivileged user that is not the agent's (a uid of its own from
backend.workload_uids, or backend.workload_user), with a clean environment
and a private directory under backend.workload_dir, so that it cannot read
the key file or the database or reach the other workloads. That needs
root: an agent that cannot isolate says so at start and on /status and
starts no workload, unless backend.isolation = "none" (the agent's user
and environment: unsafe for workloads of third parties).

backend.kind = podman runs the OCI image a grant names (workloads grant
--image) with podman, inside the PID namespace of such a supervisor, so
that a container dies with the agent too (kill -9 included).

Each workload's disk use is bounded: its log is rotated at
backend.log_max_mib (16) keeping backend.log_keep (2) parts, and a workload
whose home and checkpoint directories pass backend.workload_dir_max_mib
(1024) is killed (docs/operations.md, "Disk limits").

A durable workload's checkpoint file is looked at every
checkpoint.poll_interval (250ms); each new one, at most checkpoint.max_mib
(256) MiB, is sealed with its grant's key and published at most once a
second within checkpoint.publish_timeout (30s), and superseded ones are
deleted from the Blossom servers (docs/durable.md).

run logs the build at start (provider-agent version) and records the
relays and quorum it runs with in <data_dir>/lease-settings.json for
'workloads grant'. An invalid configuration exits 78 (the systemd units
do not restart it), other failures to start exit 1.

Settings come from the TOML config file, then PROVIDER_AGENT_<SECTION>_<KEY>
environment variables, then these flags. The identity key file must not be
readable by group or others (chmod 600); create one with 'provider-agent keygen'.

Every setting, its default and what it does: provider-agent run --print-example-config

Example:
  provider-agent run --print-example-config > /etc/provider-agent.toml
  provider-agent run --config /etc/provider-agent.toml
  provider-agent run --data-dir ./data --relay wss://relay.damus.io --relay wss://nos.lol \
      --relay wss://relay.nostr.band --quorum 2`

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", runUsage, stdout)
	flags := config.BindFlags(fs)
	printExample := fs.Bool("print-example-config", false, "print a commented config file with every setting at its default, and exit")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *printExample {
		_, err := io.WriteString(stdout, config.Example())
		return err
	}
	// Before any workload can inherit $NOTIFY_SOCKET (systemd Type=notify).
	notify := sdnotify.FromEnv()
	cfg, err := flags.Resolve(os.Environ())
	if err != nil {
		return err
	}
	logger, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	if mib := cfg.Agent.MemoryLimitMiB; mib > 0 {
		debug.SetMemoryLimit(mib << 20)
		logger.Info("Go runtime soft memory limit set", "memory_limit_mib", mib)
	}
	// The status port first: a port in use is reported before any file is
	// created and any relay is dialled.
	var ln net.Listener
	if cfg.Agent.Listen != "" {
		if ln, err = listenStatus(cfg); err != nil {
			return err
		}
		defer ln.Close() // Run closes it too; closing twice is harmless
		if !loopback(cfg.Agent.Listen) {
			logger.Warn("agent.listen is not a loopback address: /status and /metrics are served without authentication "+
				"to anyone who can reach it; firewall the port or listen on 127.0.0.1", "listen", cfg.Agent.Listen)
		}
	}
	if q, n := cfg.Lease.Quorum, len(cfg.Lease.Relays); 2*q <= n {
		logger.Warn("lease.quorum is at most half of lease.relays: the single-writer rule holds, but two holders of one epoch "+
			"(possible only when relays lose a claim outside the storage assumption) may keep their quorums on different relays "+
			"and run until one loses it; a quorum above half lets them resolve (docs/reliability.md, \"Two holders of one epoch\")",
			"quorum", q, "relays", n)
	}
	if err := config.MakeDataDir(cfg.Agent.DataDir); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	// One agent per data dir, for the whole run (released when run returns,
	// after the workloads were stopped, or by the kernel when it dies).
	held, err := holdDataDir(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer held.Close()
	secret := held.secret
	if err := writeLeaseSettings(cfg, flags.Path(os.Environ())); err != nil {
		return err
	}
	build := buildinfo.Read()
	logger.Info("provider-agent starting", "version", build.Version, "commit", build.Commit(), "go", build.GoVersion, "tags", build.Tags,
		"data_dir", cfg.Agent.DataDir)
	db, err := sqlitedb.Open(ctx, cfg.DBPath(), sqlitedb.Options{})
	if err != nil {
		return diagnoseDB(cfg.DBPath(), err)
	}
	defer db.Close()

	proc, err := newBackend(ctx, cfg, logger)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := buildinfo.Register(reg, build); err != nil {
		_ = proc.Close(context.Background())
		return err
	}
	up, ckpt, err := buildUploader(ctx, cfg, db, secret, reg, logger)
	if err != nil {
		_ = proc.Close(context.Background())
		return err
	}
	a, err := agent.New(ctx, cfg.AgentConfig(secret), agent.Deps{
		DB: db, Logger: logger, Backend: proc, Registerer: reg, Gatherer: reg, Uploader: up,
		Listener: ln, UploadInterval: uploadInterval, Checkpoints: ckpt, Version: build.String(),
		OnEvent: debugEvents(ctx, logger),
	})
	if err != nil {
		_ = proc.Close(context.Background())
		return diagnoseDB(cfg.DBPath(), err)
	}
	where := "disabled"
	if addr := a.Addr(); addr != "" {
		where = "http://" + addr + "/status"
	}
	fmt.Fprintf(stdout, "provider-agent: running as %s with %d relays (quorum %d); status %s; data %s\n",
		a.Npub(), len(cfg.Lease.Relays), cfg.Lease.Quorum, where, cfg.DBPath())
	nctx, stopNotify := context.WithCancel(ctx)
	var notifying sync.WaitGroup
	notifying.Go(func() { notifyReady(nctx, notify, a, cfg.Lease.Quorum, logger) })
	runErr := a.Run(ctx)
	stopNotify()
	notifying.Wait()
	_ = notify.Notify("STOPPING=1", "STATUS=stopping: workloads are being stopped")
	// Workload processes keep running only as long as the backend: close it
	// (stops them) with a bounded grace.
	cctx, cancel := context.WithTimeout(context.Background(), cfg.Backend.StopGrace+5*time.Second)
	defer cancel()
	if err := proc.Close(cctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("close backend: %w", err)
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	fmt.Fprintln(stdout, "provider-agent: stopped")
	return nil
}

// newBackend builds backend.kind's backend.
func newBackend(ctx context.Context, cfg config.Config, logger *slog.Logger) (backend.Backend, error) {
	if b, ok, err := fleetBackend(cfg, logger); ok {
		return b, err
	}
	if cfg.Backend.Kind == "podman" {
		p, err := backend.NewPodman(ctx, cfg.PodmanConfig(), logger)
		if err != nil {
			return nil, fmt.Errorf("backend: %w", err)
		}
		return p, nil
	}
	p, err := backend.NewProcess(cfg.ProcessConfig(), logger)
	if err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	return p, nil
}

// uploadInterval is how often the running agent uploads pending
// checkpoint tiles (sooner when the retry decorator hints at a retry).
const uploadInterval = 10 * time.Second

// listenStatus opens agent.listen. When the port is in use because another
// run holds this data dir, the error says so (naming its pid).
func listenStatus(cfg config.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", cfg.Agent.Listen)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		if held := dataDirHeld(cfg.Agent.DataDir); held != nil {
			return nil, held
		}
	}
	return nil, fmt.Errorf("agent.listen %s (--listen): %w; pick a free port, or \"\" to serve no /status and /metrics", cfg.Agent.Listen, err)
}

// loopback reports whether the host of addr is a loopback address or
// "localhost" (an empty host listens on every interface).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// buildUploader builds the checkpoint uploader when Blossom servers are
// configured (nil otherwise), with its metrics on the agent's registry,
// and what durable workloads need: the tile store (always: a grant may
// name its own servers), uploader.servers, the uploader settings and the
// [checkpoint] section.
func buildUploader(ctx context.Context, cfg config.Config, db *sql.DB, secret string, reg prometheus.Registerer, logger *slog.Logger) (uploader.Uploader, agent.CheckpointDeps, error) {
	store, err := uploader.NewStore(ctx, db, nil)
	if err != nil {
		return nil, agent.CheckpointDeps{}, fmt.Errorf("uploader: %w", err)
	}
	met, err := uploader.NewMetrics(reg)
	if err != nil {
		return nil, agent.CheckpointDeps{}, fmt.Errorf("uploader metrics: %w", err)
	}
	ucfg := cfg.UploaderConfig()
	ckpt := cfg.CheckpointDeps()
	ckpt.Store, ckpt.Metrics = store, met
	if len(cfg.Uploader.Servers) == 0 {
		return nil, ckpt, nil
	}
	up, err := uploader.BuildUploader(ucfg, uploader.Deps{Store: store, SecretKey: secret, Logger: logger, Metrics: met})
	if err != nil {
		return nil, ckpt, fmt.Errorf("uploader: %w", err)
	}
	return up, ckpt, nil
}

func newLogger(l config.LogSection, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, fmt.Errorf("log.level = %q: want debug, info, warn or error: %w", l.Level, config.ErrInvalid)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.Format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log.format = %q: want text or json: %w", l.Format, config.ErrInvalid)
}

// debugEvents logs the agent's timeline (every claim step, read, restore,
// revocation, start and stop, as the demo prints it) at debug level, or is
// nil when the logger drops debug: the events are not even formatted then.
func debugEvents(ctx context.Context, logger *slog.Logger) func(agent.Event) {
	if !logger.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	return func(e agent.Event) {
		logger.Debug("event", "kind", e.Kind, "workload", e.Workload, "detail", e.Detail)
	}
}
