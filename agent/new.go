package agent

// Building an agent: New opens what Run needs, in order (metrics, the
// backend, the database and the restored machine, the verifying ingest,
// the outbox, the durable cluster and the status server).

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"provideragent/agentdb"
	"provideragent/backend"
	"provideragent/courier"
	"provideragent/driver"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/relay"
)

// New builds an agent: it migrates the agent and courier tables, restores
// the persisted machine (or starts an empty one) and opens the status
// listener. Nothing runs until Run.
func New(ctx context.Context, cfg Config, deps Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DB == nil {
		return nil, fmt.Errorf("new agent: %w: no database", ErrInvalidConfig)
	}
	keys, err := identity.NewKeys(cfg.SecretKey)
	if err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	a := newAgent(cfg, deps, keys)
	for _, step := range []func() error{
		a.initMetrics,
		a.initBackend,
		func() error { return a.openData(ctx) },
		func() error { return a.initInbound(ctx) },
		func() error { return a.initOutbound(ctx, deps) },
	} {
		if err := step(); err != nil {
			return nil, fmt.Errorf("new agent: %w", err)
		}
	}
	a.publishHeld()
	a.refreshStatus(a.now())
	return a, nil
}

// newAgent is the agent's wiring before anything is opened: its
// collaborators from deps, its channels and tables, and the defaults of a
// logger (discarding), a name (the npub) and a clock (time.Now).
func newAgent(cfg Config, deps Deps, keys *identity.Keys) *Agent {
	a := &Agent{
		cfg: cfg, logger: deps.Logger, now: deps.Now, pool: deps.Pool,
		me:   self{keys: keys, self: keys.PublicKey(), onEvent: deps.OnEvent, version: deps.Version},
		obs:  observable{reg: deps.Registerer, gatherer: deps.Gatherer},
		data: dataState{db: deps.DB},
		work: workloads{backend: deps.Backend, drains: guarded[drains]{v: drains{}}},
		up:   uploads{uploader: deps.Uploader, interval: deps.UploadInterval},
		in: inputFeed{
			inputs: make(chan input, 1024), beats: make(chan input, 1024),
			raw: make(chan arrival, 256), received: make(chan relay.Received, 256), arrivals: newArrivals(),
		},
		out:    outbound{revReports: guarded[revocationReports]{v: revocationReports{}}},
		m:      onMachine{quorum: quorumWatch{synced: map[string]bool{}}},
		beat:   beatState{own: newOwnBeats()},
		claims: claimWork{publishes: newClaimPublishes(), reads: claimReads{kick: make(chan struct{}, 1)}},
	}
	if a.logger == nil {
		a.logger = slog.New(slog.DiscardHandler)
	}
	a.me.name = cfg.Name
	if a.me.name == "" {
		a.me.name = keys.Npub()
	}
	a.logger = a.logger.With("agent", a.me.name)
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// initMetrics registers the agent's metrics: on the given registry and
// gatherer, or on a registry of its own.
func (a *Agent) initMetrics() error {
	if a.obs.reg == nil {
		r := prometheus.NewRegistry()
		a.obs.reg, a.obs.gatherer = r, r
	}
	if a.obs.gatherer == nil {
		if g, ok := a.obs.reg.(prometheus.Gatherer); ok {
			a.obs.gatherer = g
		} else {
			a.obs.gatherer = prometheus.NewRegistry()
		}
	}
	var err error
	if a.obs.met, err = newMetrics(a.obs.reg); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// initBackend makes the process backend when none was given, and reads
// its containment and isolation.
func (a *Agent) initBackend() error {
	if a.work.backend == nil {
		proc, err := backend.NewProcess(backend.DefaultProcessConfig(), a.logger)
		if err != nil {
			return err
		}
		a.work.ownedProc, a.work.backend = proc, proc
	}
	a.work.containment, a.work.isolation = a.work.backend.Containment(), a.work.backend.Isolation()
	return nil
}

// openData migrates and opens the agent's database and restores the lease
// machine from it (restore), whose shell performs process operations
// through the actuator.
func (a *Agent) openData(ctx context.Context) error {
	if err := Migrate(ctx, a.data.db); err != nil {
		return err
	}
	var err error
	if a.data.tables, err = agentdb.Open(ctx, a.data.db); err != nil {
		return err
	}
	a.data.rows = &dbStore{db: a.data.db, st: a.data.tables}
	a.work.act = newActuator(a.work.backend, a.logger, a.send)
	return a.restore(ctx)
}

// initInbound prepares the way events come in: the signer policy and the
// subscriptions of the restored leases, the verifying ingest, and the
// subscription cursor.
func (a *Agent) initInbound(ctx context.Context) error {
	a.inbound.policy = newSignerPolicy(a.me.self, a.cfg.TrustedIssuers)
	a.refreshPolicy(a.machine().IDs())
	a.m.subs.refresh(a)
	icfg := a.cfg.Ingest
	icfg.MaxSkew = a.cfg.Lease.MaxSkew
	icfg.HeartbeatMaxAge = a.cfg.Lease.Stale
	var err error
	if a.inbound.ingestor, err = heartbeat.NewIngestor(icfg, a.inbound.policy, a.obs.reg, a.logger); err != nil {
		return err
	}
	cur, err := a.loadCursor(ctx)
	if err != nil {
		return err
	}
	a.data.cursor = newCursorTracker(cur)
	return nil
}

// initOutbound prepares the way the agent reaches out: the relay pool
// (unless given), the durable outbox, the checkpoint work and the status
// server. Once the outbox is open, a failure closes it.
func (a *Agent) initOutbound(ctx context.Context, deps Deps) error {
	var err error
	if a.pool == nil {
		if a.pool, err = a.newPool(); err != nil {
			return err
		}
	}
	if a.out.courier, err = courier.Open(ctx, a.data.db, a.cfg.Courier, courier.Deps{Logger: a.logger, Registerer: a.obs.reg}); err != nil {
		return err
	}
	a.data.rows.outbox = a.out.courier
	if err := a.initDurables(ctx, deps.Checkpoints); err != nil {
		_ = a.out.courier.Close()
		return err
	}
	if a.cfg.Listen != "" || deps.Listener != nil {
		if a.obs.http, err = newHTTPServerOn(a.cfg.Listen, deps.Listener, a.obs.gatherer, a.Status, a.healthy); err != nil {
			_ = a.out.courier.Close()
			return err
		}
	}
	return nil
}

// initDurables builds the durable-workload cluster over the agent's
// relays, ingest and ledger, with the workloads the restored machine
// holds.
func (a *Agent) initDurables(ctx context.Context, deps CheckpointDeps) error {
	holding := map[string]uint64{}
	for _, id := range a.machine().IDs() {
		if w, ok := a.machine().Workload(id); ok && w.Holder == a.me.self && w.State.Holding() {
			holding[id] = w.Epoch
		}
	}
	env := durableEnv{
		keys: a.me.keys, self: a.me.self, issuers: a.cfg.TrustedIssuers, logger: a.logger, met: a.obs.met,
		now: a.now, emit: a.emit, ledger: a.data.tables, backend: a.work.backend,
	}
	wire := durableWiring{
		pool: a.pool, verifier: a.inbound.ingestor, lease: a.cfg.Lease, readTimeout: a.claimIOTimeout(), secretKey: a.cfg.SecretKey,
	}
	var err error
	a.ckpt, err = newDurables(ctx, deps, env, wire, holding)
	return err
}

// newPool builds the default relay layer: relay's supervised pool.
func (a *Agent) newPool() (RelayPool, error) {
	secret, err := identity.ParseSecretKey(a.cfg.SecretKey)
	if err != nil {
		return nil, err
	}
	return newRelayPool(a.cfg.RelayConfig(), relay.Options{
		Interests: a.m.subs.interests(a), SinceFor: a.sinceFor, SecretKey: secret, Logger: a.logger, Registerer: a.obs.reg, Now: a.now,
		Known: a.beat.own.known,
	})
}

// restore opens the driver: the persisted machine (every workload row the
// database holds), or an empty one.
func (a *Agent) restore(ctx context.Context) error {
	a.m.perf = &performer{a: a, ctx: context.Background()} // Run sets its own
	d, err := driver.Open(ctx, a.now(), driver.Config{CommitWait: a.cfg.CommitWait, CommitBatch: commitBatch}, a.cfg.Lease, a.me.self, driver.Deps[[]byte, commitExtra]{
		Store: a.data.rows, Outbox: eventBuilder{a}, Performer: a.m.perf, Events: commitEvents{a},
		Finished: func(toks []driver.Token) {
			for _, t := range toks {
				a.data.cursor.Done(agentdb.Token(t))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	a.sh = driver.NewShell(d, a.now(), driver.ShellConfig{}, driver.ShellDeps{
		Processes: a.work.act,
		Cursor:    func() int64 { return a.data.cursor.Cursor() },
	})
	if d.Restored() {
		// Restored holders wait in syncing for M relays (rule 10), and
		// RelaySynced starts them again.
		if !d.MetaSaved() {
			a.logger.Warn("machine metadata missing: restored the workload rows with empty relay tables", "workloads", d.Machine().Len())
		}
		a.logger.Info("restored lease machine", "workloads", d.Machine().Len(), "awaiting_sync", d.Machine().AwaitingSync())
	}
	return nil
}
