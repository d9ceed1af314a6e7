package agent

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"

	"provideragent/agentdb"
	"provideragent/backend"
	"provideragent/courier"
	"provideragent/driver"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
	"provideragent/relay"
	"provideragent/uploader"
)

// Deps are the agent's injected collaborators.
type Deps struct {
	// DB is the agent's SQLite file (sqlitedb.Open). Required; the caller
	// closes it after Run returned.
	DB *sql.DB
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Registerer receives every collector (agent, heartbeat ingest,
	// courier); Gatherer serves /metrics. Default: a fresh registry.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Backend runs workloads. Default: backend's Process with its
	// defaults (closed when Run returns). The agent never closes a Backend
	// it was given.
	Backend backend.Backend
	// Pool is the relay layer. Default: the built-in websocket client over
	// Lease.Relays and DialAddrs.
	Pool RelayPool
	// Uploader, when set, uploads pending checkpoint tiles to Blossom
	// servers every UploadInterval (default 10 s).
	Uploader       uploader.Uploader
	UploadInterval time.Duration
	// Checkpoints configure durable workloads (leases with a checkpoint
	// policy).
	Checkpoints CheckpointDeps
	// Listener, when set, is where /metrics, /healthz and /status are
	// served instead of listening on Config.Listen (run opens it before
	// anything else, so a port in use is reported first). Run closes it;
	// when New fails, the caller does.
	Listener net.Listener
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// OnEvent receives timeline events (the demo prints them). It is called
	// from the agent's goroutines and must not block.
	OnEvent func(Event)
	// Version names the running build on /status ("" leaves it out).
	Version string
}

// Event is one notable thing the agent did or saw, for a human timeline.
type Event struct {
	Time     time.Time
	Agent    string
	Kind     string // heartbeat, quorum, relays, state, start, stop, revocation, claim, read, received, persist
	Workload string
	Detail   string
	// State and Epoch are set for Kind "state" (the state entered).
	State string
	Epoch uint64
}

// input is one machine input, produced off the machine goroutine.
type input struct {
	hb        *lease.Heartbeat
	rev       *heartbeat.Revocation
	claims    []relayClaim
	grant     *lease.Spec
	exit      *lease.ProcessExit
	respawn   *lease.RespawnResult
	restored  *lease.RestoreResult
	handover  *handoverInput
	claimAck  *lease.ClaimAck
	claimRead *lease.ClaimRead
	clock     *clockReport
	cursorTok agentdb.Token // cursor token of the event (hasTok: set)
	hasTok    bool
	arrival   uint64 // the event's arrival number (arrivals), 0: none
}

// Agent is one running provider agent. Who may touch a field is in its
// type: the first five are set by New and only read after it; m is the
// machine goroutine's alone (onMachine); every other field is safe for
// any goroutine by its own type (a lock behind its methods or guarded,
// atomics, channels, or a collaborator that synchronizes itself), with
// what is not said so on its declaration.
type Agent struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time
	me     self       // who this agent is
	obs    observable // its own metrics, their registry and the status server

	m onMachine // the machine goroutine's own state

	sh    *agentShell // the one driver of the lease machine in its shell: turns, saves, process operations; its fence gate answers any goroutine
	steps stepClock   // when the machine last stepped, for /healthz and the benchmarks
	data  dataState   // the SQLite file and what the agent keeps in it

	pool    RelayPool
	inbound inbound   // verifying and admitting what the relays deliver
	in      inputFeed // what the machine loop applies
	out     outbound  // the durable outbox
	work    workloads // the backend that runs workloads, and its actuator
	up      uploads   // the checkpoint tile uploader

	view   guarded[statusView] // what /status shows (statusview.go)
	beat   beatState           // what this provider's heartbeats list (beat.go)
	claims claimWork           // the claim step's publishes and reads (claimreads.go)
	ckpt   *durables           // durable workloads: restores, checkpoints, moves (durables.go)
}

// onMachine is the state only the machine goroutine reads and writes:
// machineLoop and what it calls (the driver's Performer, the
// subscription refresh, the loop's bookkeeping). Nothing in it is locked;
// another goroutine that needs any of it gets a copy (statusView,
// beatState.held, stepClock).
type onMachine struct {
	perf      *performer    // the driver's Performer
	subs      subscriptions // the relay subscription's sets (subs.go)
	quorum    quorumWatch   // this provider's own relay quorum as last logged
	turns     loopTurns     // the machine loop's timing
	marks     []arrivalMark // applyMarks' buffer
	status    statusWork    // what changed since the status document's refresh
	heldDirty bool          // the held list changed since publishHeld
	cmdsMore  bool          // operator commands wait beyond the last batch
}

// self is who this agent is: its keys, its hex public key, its name on
// the timeline, and the timeline's callback (nil: none).
type self struct {
	keys    *identity.Keys
	self    string
	name    string
	onEvent func(Event)
	version string // the build, for /status
}

// observable is the agent's own metrics, their registry and its status
// server.
type observable struct {
	met      *metrics
	reg      prometheus.Registerer
	gatherer prometheus.Gatherer
	http     *httpServer
}

// dataState is the agent's SQLite file: the driver's Store over it, the
// agent's tables, the relay cursor, and the last write's error.
type dataState struct {
	db       *sql.DB
	tables   *agentdb.Store
	rows     *dbStore // the driver's Store
	cursor   *cursorTracker
	writeErr atomic.Pointer[string] // the last database write's error; nil when it succeeded
}

// inbound verifies what the relays deliver and decides what is worth a
// WARN.
type inbound struct {
	ingestor *heartbeat.Ingestor
	policy   *signerPolicy
	log      ingestLog // which refused events are worth a WARN (ingestlog.go)
}

// outbound is the durable outbox of revocations, withdrawn markers and
// announcements.
type outbound struct {
	courier    *courier.Courier
	revReports guarded[revocationReports] // revocations whose first short attempt was reported
}

// workloads is the backend that runs workloads and the actuator that
// performs the Shell's process operations off the machine goroutine.
type workloads struct {
	backend     backend.Backend
	act         *actuator
	ownedProc   *backend.Process    // closed by Run when the agent made it
	containment backend.Containment // shown on /status
	isolation   backend.Isolation   // likewise
	drains      guarded[drains]     // drains whose moves run (drain.go)
}

// uploads is the checkpoint tile uploader and how often it runs.
type uploads struct {
	uploader uploader.Uploader
	interval time.Duration
}

// beatState is what this provider's heartbeats list and what it published.
type beatState struct {
	held       atomic.Pointer[[]heartbeat.WorkloadEpoch] // the held list the heartbeat loop publishes (publishHeld)
	own        *ownBeats                                 // our recent heartbeat events (ownbeats.go)
	tagsWarned atomic.Bool                               // a relay's max_event_tags was reported
}

// claimWork is the claim step's feedback: publishes bounded by sem, reads
// batched, both on goroutines wg waits for.
type claimWork struct {
	reads claimReads    // claim reads waiting to be batched (claimreads.go)
	sem   chan struct{} // bounds the claim publishes in flight
	wg    sync.WaitGroup
}

// revocationReports are the revocation events (by id) whose first attempt
// reached fewer than M relays and was reported (the outbox retries many
// times; the timeline says it once).
type revocationReports map[string]bool

// inputFeed carries what the machine loop applies.
type inputFeed struct {
	inputs chan input
	// beats carries heartbeat inputs, which the machine loop takes before
	// the others: bulk work (claims of a mass failover, grants) never
	// delays this provider's view of quorum.
	beats chan input
	// received is what the relay layer delivers; routeLoop feeds copies of
	// our own heartbeats to beats at once and queues the rest for ingest
	// in raw, so that a backlog of events to verify never delays them.
	received chan relay.Received
	routed   atomic.Int64 // events routeLoop holds for ingest
	raw      chan arrival
	// arrivals orders what the relays' streams show (gaps, syncs, our own
	// heartbeats) with the events verified meanwhile (arrivals.go).
	arrivals *arrivals
	// hold (tests only) makes the machine loop leave inputs in their
	// channel, ingested but not applied, while it keeps ticking and saving.
	hold atomic.Bool
}

// statusView is what /status shows: the machine goroutine writes it
// (refreshStatus), any goroutine reads it (Status copies the rows), all
// under its lock (Agent.view).
type statusView struct {
	status Status
	idx    map[string]int      // workload id -> row in status.Workloads
	counts map[lease.State]int // by state, at the last refresh
}

// statusWork is the machine goroutine's bookkeeping of the status
// document: what changed since its last refresh.
type statusWork struct {
	built     time.Time // last full rebuild of the rows
	refreshed time.Time // last refresh
	dirty     bool      // a transition happened since the last refresh
	ids       dirtySet  // workloads whose row changed since the last refresh
}

// quorumWatch is this provider's own relay quorum as the machine goroutine
// last saw and logged it.
type quorumWatch struct {
	synced   map[string]bool // relays whose EOSE arrived since start
	had      bool            // own relay quorum at the last tick
	ever     bool            // own quorum was reached since start
	noRelays bool            // no relay was connected at the last check
}

// loopTurns is the machine loop's timing.
type loopTurns struct {
	start time.Time // the machine loop began
	// slow counts turns over slowTurn since the last WARN, logged at
	// slowLogged.
	slow       int
	slowLogged time.Time
}

// stepClock is when the machine last stepped and its longest step, for
// any goroutine.
type stepClock struct {
	last atomic.Int64 // a.now() of the last step, unix ns; 0 before Run
	max  atomic.Int64 // longest step since ResetStepMax, ns (benchmarks)
}

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
		work: workloads{backend: deps.Backend},
		up:   uploads{uploader: deps.Uploader, interval: deps.UploadInterval},
		in: inputFeed{
			inputs: make(chan input, 1024), beats: make(chan input, 1024),
			raw: make(chan arrival, 256), received: make(chan relay.Received, 256), arrivals: newArrivals(),
		},
		out:    outbound{revReports: guarded[revocationReports]{v: revocationReports{}}},
		m:      onMachine{quorum: quorumWatch{synced: map[string]bool{}}},
		beat:   beatState{own: newOwnBeats()},
		claims: claimWork{sem: make(chan struct{}, maxClaimPublishes), reads: claimReads{kick: make(chan struct{}, 1)}},
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
	a.inbound.policy = newSignerPolicy(a.cfg.TrustedIssuers)
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

// commitBatch bounds the workloads one commit writes (driver.Config's
// CommitBatch): a bigger step is committed in pieces between the machine
// loop's other turns.
const commitBatch = 256

// machine is the driven lease machine, for reading (machine goroutine).
func (a *Agent) machine() *lease.Machine { return a.sh.Driver().Machine() }

// Addr is the status server's address ("" when disabled).
func (a *Agent) Addr() string {
	if a.obs.http == nil {
		return ""
	}
	return a.obs.http.Addr()
}

// PublicKey is the agent's hex public key.
func (a *Agent) PublicKey() string { return a.me.self }

// Npub is the agent's npub.
func (a *Agent) Npub() string { return a.me.keys.Npub() }

// Run runs every loop until ctx ends, then shuts down cleanly: in-flight
// writes finish, sockets close, every goroutine is awaited.
func (a *Agent) Run(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.m.perf.ctx = runCtx
	var wg sync.WaitGroup
	goLoop := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && runCtx.Err() == nil {
				a.logger.Error("loop failed", "loop", name, "err", err)
			}
		}()
	}
	if a.obs.http != nil {
		goLoop("http", a.obs.http.serve)
	}
	goLoop("relays", func(ctx context.Context) error { return a.pool.Run(ctx, a.in.received) })
	goLoop("route", a.routeLoop)
	for range 2 {
		goLoop("ingest", a.ingestLoop)
	}
	goLoop("courier", func(ctx context.Context) error {
		select {
		case <-a.sh.Started():
		case <-ctx.Done():
			return nil
		}
		return a.out.courier.Run(ctx, &NostrForwarder{
			Pool: a.pool, Quorum: a.cfg.Lease.M, Timeout: a.cfg.PublishTimeout, Gate: a.sh,
			OnAck: a.onOutboxAck, OnAttempt: a.onOutboxAttempt,
		})
	})
	goLoop("heartbeat", a.heartbeatLoop)
	goLoop("claim-reads", a.claimReadLoop)
	goLoop("backend-exits", a.exitLoop)
	goLoop("clock-check", a.clockCheckLoop)
	if a.up.uploader != nil {
		goLoop("uploads", a.uploadLoop)
	}
	if a.ckpt.publishes() {
		goLoop("checkpoints", a.ckpt.run)
	}

	err := a.machineLoop(runCtx)
	cancel()
	wg.Wait()
	a.claims.wg.Wait()
	a.work.act.wait()
	if a.cfg.StopWorkloadsOnExit {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		for _, id := range a.machine().IDs() {
			_ = a.work.backend.Stop(sctx, id, stopReasonShutdown)
		}
		scancel()
	}
	if cerr := a.out.courier.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close courier: %w", cerr)
	}
	if a.work.ownedProc != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		if cerr := a.work.ownedProc.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("close backend: %w", cerr)
		}
		ccancel()
	}
	return err
}

// send hands an input to the machine goroutine unless ctx ended.
func (a *Agent) send(ctx context.Context, in input) {
	select {
	case a.in.inputs <- in:
	case <-ctx.Done():
	}
}

func (a *Agent) emit(kind, workload, format string, args ...any) {
	if a.me.onEvent == nil {
		return
	}
	a.me.onEvent(Event{Time: a.now(), Agent: a.me.name, Kind: kind, Workload: workload, Detail: fmt.Sprintf(format, args...)})
}

func (a *Agent) exitLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ex, ok := <-a.work.backend.Exits():
			if !ok { // the backend was closed: nothing more will end
				<-ctx.Done()
				return nil
			}
			if ex.Stopped { // asked for by a stop: not the machine's ProcessExited
				continue
			}
			a.send(ctx, input{exit: &lease.ProcessExit{Workload: ex.WorkloadID, Epoch: ex.Epoch, Reason: ex.String()}})
		}
	}
}

// since is the cursor, clamped to now, minus a margin for signers' clock
// offsets and relay delay (0: no cursor yet, read everything stored).
func (a *Agent) since() nostr.Timestamp {
	c := min(a.data.cursor.Cursor(), a.now().Unix())
	if c <= 0 {
		return 0
	}
	s := c - int64((a.cfg.Lease.MaxSkew+a.cfg.Lease.RelayDelay)/time.Second) - 1
	return nostr.Timestamp(max(s, 1))
}

func (a *Agent) connected() int { return a.pool.Connected() }

// healthy is /healthz: it fails when fewer than M relays are connected,
// when the machine loop has not completed a step for MaxStepAge (stuck, or
// not running), or when the last database write failed (until one
// succeeds; the loop writes at least every 5 s).
func (a *Agent) healthy() error {
	if a.pool == nil {
		return errors.New("not started")
	}
	if up := a.connected(); up < a.cfg.Lease.M {
		return fmt.Errorf("%d relays connected, quorum needs %d", up, a.cfg.Lease.M)
	}
	last := a.steps.last.Load()
	if last == 0 {
		return errors.New("machine loop not running")
	}
	if age := a.now().Sub(time.Unix(0, last)); age > a.cfg.MaxStepAge {
		return fmt.Errorf("machine loop stuck: last step %v ago, limit %v", age.Round(time.Millisecond), a.cfg.MaxStepAge)
	}
	if p := a.data.writeErr.Load(); p != nil {
		return fmt.Errorf("database not writable: %v", *p)
	}
	return nil
}

// noteWrite records the outcome of a database write for healthy.
func (a *Agent) noteWrite(err error) {
	if err == nil {
		a.data.writeErr.Store(nil)
		return
	}
	msg := err.Error()
	a.data.writeErr.Store(&msg)
}

func (a *Agent) Track(ctx context.Context, spec lease.Spec) {
	s := spec
	a.send(ctx, input{grant: &s})
}

// heldList returns the current heartbeat list (read only: publishHeld
// stores a new slice each time).
func (a *Agent) heldList() []heartbeat.WorkloadEpoch {
	p := a.beat.held.Load()
	if p == nil {
		return nil
	}
	return *p
}
