package agent

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
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

// ErrInvalidConfig wraps every Config.Validate failure.
var ErrInvalidConfig = errors.New("agent: invalid config")

// Config is the agent's runtime configuration (config turns the TOML
// file, environment and flags into one).
type Config struct {
	// Lease is the lease machine's configuration; Lease.Relays is the relay
	// set the agent connects to and judges quorum over.
	Lease lease.Config
	// SecretKey is the identity (hex or nsec).
	SecretKey string
	// DialAddrs maps a canonical relay URL to the websocket URL actually
	// dialled (a proxy in the demo and tests). Events stay labelled with
	// the canonical URL.
	DialAddrs map[string]string
	// TrustedIssuers are hex public keys whose lease grants (kind 38388)
	// are accepted from relays.
	TrustedIssuers []string
	// Listen is the /metrics, /healthz and /status address; "" disables it.
	// Default "127.0.0.1:9464".
	Listen string
	// TickInterval is how often the machine's Tick runs. Default 250 ms.
	TickInterval time.Duration
	// PublishTimeout bounds one publish (heartbeats, claims). Default 5 s.
	PublishTimeout time.Duration
	// MaxStepAge is how long the machine loop may go without completing a
	// step (it ticks every TickInterval) before /healthz reports it stuck.
	// Default 30 s.
	MaxStepAge time.Duration
	// CommitWait bounds how long one machine step's commit (and the
	// periodic save) waits for the database: for the connection, and for
	// SQLite's write lock when another process holds it. A step that could
	// not commit is held and retried, each retry waiting 20 ms at most;
	// fencing never waits for it, and the machine's ticks wait for the
	// database at most this long once per episode. Default 250 ms, one
	// tick.
	CommitWait time.Duration
	// HeartbeatTTL is the NIP-40 expiration of our heartbeats, after
	// created_at. 0 (the default) means
	// heartbeat.MinHeartbeatTTL(Lease.Stale, Lease.MaxSkew): Paygress's live
	// window, 300 s, unless stale + max_skew is longer (see
	// heartbeat.DefaultHeartbeatTTL for why). Otherwise at least that.
	HeartbeatTTL time.Duration
	// RestartMaxAttempts is the respawn budget given to lease grants from
	// the relays whose restart policy is on-failure without a count
	// (max_attempts is optional on the wire). 0 means never respawn them.
	// Default 5.
	RestartMaxAttempts int
	// Ingest bounds what the verifying ingest accepts; MaxSkew and
	// HeartbeatMaxAge are taken from Lease.
	Ingest heartbeat.Config
	// Courier tunes the outbox (revocations).
	Courier courier.Config
	// StopWorkloadsOnExit stops every workload process when Run returns
	// (default false: processes keep running across an agent restart; the
	// demo and tests set it).
	StopWorkloadsOnExit bool
	// Name labels this agent in logs and timeline events. Default: the npub.
	Name string
	// ClockCheckInterval is how often the local clock is compared with the
	// relays' (their HTTP Date header); outside MaxSkew/2 for two checks in
	// a row, the machine refuses takeovers and fences what it holds. 0
	// disables the check. Default 1 min.
	ClockCheckInterval time.Duration
}

// The daemon's defaults, one owner each: DefaultConfig and the config file's
// defaults (config) are built from them.
const (
	DefaultListen             = "127.0.0.1:9464"
	DefaultTickInterval       = 250 * time.Millisecond
	DefaultPublishTimeout     = 5 * time.Second
	DefaultMaxStepAge         = 30 * time.Second
	DefaultRestartMaxAttempts = 5
	// The outbox of revocations: courier's defaults except these (its
	// backoff cap, flush interval and retention are courier's).
	DefaultCourierMaxAttempts    = 10
	DefaultCourierInitialBackoff = time.Second
	// RelayBackoffMax caps the reconnect backoff of the agent's relay
	// connections (relay's own default is 30 s): a relay that comes
	// back counts towards quorum again within seconds, well inside the
	// lease's takeover_after.
	RelayBackoffMax = 5 * time.Second
)

// DefaultConfig returns the defaults; set SecretKey and Lease.Relays.
func DefaultConfig() Config {
	c := courier.DefaultConfig()
	c.MaxAttempts = DefaultCourierMaxAttempts
	c.InitialBackoff = DefaultCourierInitialBackoff
	c.ForwardTimeout = 20 * time.Second
	// A receipt claimed by a flush that died with the process (kill -9) is
	// due again after ClaimTimeout: keep it short, above ForwardTimeout.
	c.ClaimTimeout = 30 * time.Second
	ing := heartbeat.DefaultConfig()
	// Heartbeats are split into events of at most 60 KiB
	// (heartbeat.BuildBeat); nothing larger passes strfry (65,536 bytes
	// per event) on the way to us either.
	ing.MaxEventBytes, ing.MaxContentBytes = 64<<10, 64<<10
	return Config{
		Lease:              lease.DefaultConfig(),
		Listen:             DefaultListen,
		TickInterval:       DefaultTickInterval,
		PublishTimeout:     DefaultPublishTimeout,
		MaxStepAge:         DefaultMaxStepAge,
		CommitWait:         DefaultTickInterval,
		RestartMaxAttempts: DefaultRestartMaxAttempts,
		ClockCheckInterval: time.Minute,
		Ingest:             ing,
		Courier:            c,
	}
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if err := c.Lease.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if _, err := identity.NewKeys(c.SecretKey); err != nil {
		return bad("secret key: %v", err)
	}
	for i, k := range c.TrustedIssuers {
		if !lease.IsHexPubkey(k) {
			return bad("trusted_issuers[%d] = %q, must be a 64-character lower-case hex pubkey", i, k)
		}
	}
	for canon, dial := range c.DialAddrs {
		if _, err := lease.NormalizeRelayURL(dial); err != nil {
			return bad("dial_addrs[%q] = %q: %v", canon, dial, err)
		}
	}
	if c.TickInterval <= 0 || c.TickInterval > c.Lease.Stale {
		return bad("tick_interval = %v, must be positive and at most lease stale %v", c.TickInterval, c.Lease.Stale)
	}
	if c.MaxStepAge <= c.TickInterval {
		return bad("max_step_age = %v, must exceed tick_interval %v", c.MaxStepAge, c.TickInterval)
	}
	if c.CommitWait <= 0 {
		return bad("commit_wait = %v, must be positive", c.CommitWait)
	}
	if c.PublishTimeout <= 0 {
		return bad("publish_timeout = %v, must be positive", c.PublishTimeout)
	}
	if c.RestartMaxAttempts < 0 || c.RestartMaxAttempts > lease.MaxRestartAttempts {
		return bad("restart_max_attempts = %d, must be 0 to %d", c.RestartMaxAttempts, lease.MaxRestartAttempts)
	}
	if minTTL := heartbeat.MinHeartbeatTTL(c.Lease.Stale, c.Lease.MaxSkew); c.HeartbeatTTL != 0 && c.HeartbeatTTL < minTTL {
		return bad("heartbeat_ttl = %v, must be 0 (default) or at least %v (Paygress's live window, and lease stale + max_skew)", c.HeartbeatTTL, minTTL)
	}
	if err := c.Courier.Validate(); err != nil {
		return fmt.Errorf("%w: courier: %w", ErrInvalidConfig, err)
	}
	return nil
}

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

// Agent is one running provider agent.
type Agent struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time
	me     self       // who this agent is
	obs    observable // its own metrics, their registry and the status server

	sh   *agentShell // the one driver of the lease machine in its shell: turns, saves, process operations, the fence gate (machine goroutine, but for the gate)
	perf *performer  // the driver's Performer
	data dataState   // the SQLite file and what the agent keeps in it

	pool    RelayPool
	subs    subscriptions // the relay subscription's sets (machine goroutine; subs.go)
	inbound inbound       // verifying and admitting what the relays deliver
	in      inputFeed     // what the machine loop applies
	out     outbound      // the durable outbox
	work    workloads     // the backend that runs workloads, and its actuator
	up      uploads       // the checkpoint tile uploader

	loop   loopState  // the machine loop's timing and this provider's quorum
	view   statusView // what /status shows (statusview.go)
	beat   beatState  // what this provider's heartbeats list (beat.go)
	claims claimWork  // the claim step's publishes and reads (claimreads.go)
	ckpt   ckptWork   // durable workloads: restores and checkpoints (checkpoint.go)
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
	revReports revocationReports // revocations whose first short attempt was reported
}

// workloads is the backend that runs workloads and the actuator that
// performs the Shell's process operations off the machine goroutine.
type workloads struct {
	backend     backend.Backend
	act         *actuator
	ownedProc   *backend.Process    // closed by Run when the agent made it
	containment backend.Containment // shown on /status
	isolation   backend.Isolation   // likewise
}

// uploads is the checkpoint tile uploader and how often it runs.
type uploads struct {
	uploader uploader.Uploader
	interval time.Duration
}

// loopState is the machine loop's timing and this provider's own relay
// quorum as last logged.
type loopState struct {
	turns  loopTurns
	quorum quorumWatch
	marks  []arrivalMark // applyMarks' buffer
}

// beatState is what this provider's heartbeats list and what it published.
type beatState struct {
	held       atomic.Pointer[[]heartbeat.WorkloadEpoch] // the held list the heartbeat loop publishes (publishHeld)
	dirty      bool                                      // held changed since publishHeld (machine goroutine)
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

// revocationReports remembers the revocation events whose first attempt
// reached fewer than M relays and was reported (the outbox retries many
// times; the timeline says it once).
type revocationReports struct {
	mu   sync.Mutex
	seen map[string]bool
}

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
	// cmdsMore: operator commands wait beyond the last batch (machine
	// goroutine).
	cmdsMore bool
}

// statusView is what /status shows. status and its rows are written by the
// machine goroutine only, under mu; other goroutines read them under it
// (Status copies the rows).
type statusView struct {
	mu        sync.Mutex
	status    Status
	idx       map[string]int      // workload id -> row in status.Workloads (machine goroutine)
	built     time.Time           // last full rebuild of the rows
	counts    map[lease.State]int // by state, at the last refresh
	refreshed time.Time           // last refresh
	dirty     bool                // a transition happened since the last refresh
	ids       dirtySet            // workloads whose row changed since the last refresh
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
	start    time.Time    // the machine loop began (machine goroutine only)
	lastStep atomic.Int64 // a.now() of the last step, unix ns; 0 before Run
	stepMax  atomic.Int64 // longest step since ResetStepMax, ns (benchmarks)
	// slow counts turns over slowTurn since the last WARN, logged at
	// slowLogged (machine goroutine only).
	slow       int
	slowLogged time.Time
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
		out:    outbound{revReports: revocationReports{seen: map[string]bool{}}},
		loop:   loopState{quorum: quorumWatch{synced: map[string]bool{}}},
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
	if a.obs.met, err = newMetrics(a.obs.reg); err != nil {
		return nil, fmt.Errorf("new agent: register metrics: %w", err)
	}
	if a.work.backend == nil {
		proc, err := backend.NewProcess(backend.DefaultProcessConfig(), a.logger)
		if err != nil {
			return nil, fmt.Errorf("new agent: %w", err)
		}
		a.work.ownedProc, a.work.backend = proc, proc
	}
	a.work.containment, a.work.isolation = a.work.backend.Containment(), a.work.backend.Isolation()
	if err := Migrate(ctx, a.data.db); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if a.data.tables, err = agentdb.Open(ctx, a.data.db); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	a.data.rows = &dbStore{db: a.data.db, st: a.data.tables}
	a.work.act = newActuator(a.work.backend, a.logger, a.send)
	if err := a.restore(ctx); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	a.inbound.policy = newSignerPolicy(cfg.TrustedIssuers)
	a.refreshPolicy(a.machine().IDs())
	a.subs.refresh(a)
	icfg := cfg.Ingest
	icfg.MaxSkew = cfg.Lease.MaxSkew
	icfg.HeartbeatMaxAge = cfg.Lease.Stale
	if a.inbound.ingestor, err = heartbeat.NewIngestor(icfg, a.inbound.policy, a.obs.reg, a.logger); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	cur, err := a.loadCursor(ctx)
	if err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	a.data.cursor = newCursorTracker(cur)
	if a.pool == nil {
		if a.pool, err = a.newPool(); err != nil {
			return nil, fmt.Errorf("new agent: %w", err)
		}
	}
	if a.out.courier, err = courier.Open(ctx, a.data.db, cfg.Courier, courier.Deps{Logger: a.logger, Registerer: a.obs.reg}); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	a.data.rows.outbox = a.out.courier
	if err := a.initCheckpoints(ctx, deps.Checkpoints); err != nil {
		_ = a.out.courier.Close()
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if cfg.Listen != "" || deps.Listener != nil {
		if a.obs.http, err = newHTTPServerOn(cfg.Listen, deps.Listener, a.obs.gatherer, a.Status, a.healthy); err != nil {
			_ = a.out.courier.Close()
			return nil, fmt.Errorf("new agent: %w", err)
		}
	}
	a.publishHeld()
	a.refreshStatus(a.now())
	return a, nil
}

func normaliseKeys(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if n, err := lease.NormalizeRelayURL(k); err == nil {
			out[n] = v
		} else {
			out[k] = v
		}
	}
	return out
}

// RelayConfig is the relay pool for this agent's relays, the agent's own
// and that of CLI commands that publish for it: relay's defaults,
// Lease.Relays dialled as DialAddrs says, PublishTimeout, and reconnects
// backing off at most RelayBackoffMax.
func (c Config) RelayConfig() relay.Config {
	rc := relay.DefaultConfig()
	rc.URLs = c.Lease.Relays
	rc.DialAddrs = c.DialAddrs
	rc.PublishTimeout = c.PublishTimeout
	rc.BackoffMax = min(rc.BackoffMax, RelayBackoffMax)
	return rc
}

// newPool builds the default relay layer: relay's supervised pool.
func (a *Agent) newPool() (RelayPool, error) {
	secret, err := identity.ParseSecretKey(a.cfg.SecretKey)
	if err != nil {
		return nil, err
	}
	return newRelayPool(a.cfg.RelayConfig(), relay.Options{
		Interests: a.subs.interests(a), SinceFor: a.sinceFor, SecretKey: secret, Logger: a.logger, Registerer: a.obs.reg, Now: a.now,
		Known: a.beat.own.known,
	})
}

// restore opens the driver: the persisted machine (every workload row the
// database holds), or an empty one.
func (a *Agent) restore(ctx context.Context) error {
	a.perf = &performer{a: a, ctx: context.Background()} // Run sets its own
	d, err := driver.Open(ctx, a.now(), driver.Config{CommitWait: a.cfg.CommitWait, CommitBatch: commitBatch}, a.cfg.Lease, a.me.self, driver.Deps[[]byte, commitExtra]{
		Store: a.data.rows, Outbox: eventBuilder{a}, Performer: a.perf, Events: commitEvents{a},
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
	a.perf.ctx = runCtx
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
	if a.ckpt.watcher != nil {
		goLoop("checkpoints", a.checkpointLoop)
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
	last := a.loop.turns.lastStep.Load()
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

// Status returns the latest status document (refreshed every second), with
// the relay connections as they are now: Synced needs at least M relays
// connected that delivered EOSE on their current connection.
func (a *Agent) Status() Status {
	a.view.mu.Lock()
	s := a.view.status
	// The rows are updated in place by refreshStatus: copy them.
	s.Workloads = slices.Clone(s.Workloads)
	a.view.mu.Unlock()
	for i := range s.Workloads {
		w := &s.Workloads[i]
		w.Running = a.work.backend.Running(w.ID)
		if w.Primary == a.me.self {
			w.Checkpoint = a.heldStateURI(w.ID, w.Epoch)
		}
	}
	s.Relays = a.pool.Status()
	s.Version = a.me.version
	synced := 0
	for _, r := range s.Relays {
		if r.Connected && r.EOSE {
			synced++
		}
	}
	s.Synced = s.Synced && synced >= a.cfg.Lease.M
	a.fillReasons(s.Workloads)
	return s
}

// publishHeld publishes the (workload, epoch) pairs held, for heartbeats.
// The machine goroutine calls it on ticks after transitions (beat.dirty),
// so a mass transition rebuilds the list a few times a second at most.
func (a *Agent) publishHeld() {
	a.beat.dirty = false
	held := a.machine().Held(nil) // a new slice: readers keep the one they loaded
	a.beat.held.Store(&held)
}

// statusRebuildEvery is how often refreshStatus rebuilds every row of the
// status document; between rebuilds it updates the rows of workloads that
// changed state (a standby's followed epoch may lag this long).
const statusRebuildEvery = 30 * time.Second

// refreshStatus updates the status document and the gauges (machine
// goroutine only): the rows of the workloads that changed state since the
// last refresh, every row every statusRebuildEvery.
func (a *Agent) refreshStatus(now time.Time) {
	a.view.refreshed, a.view.dirty = now, false
	a.observeCheckpointAge(now)
	counts := a.machine().StateCounts(nil)
	for _, s := range lease.States {
		a.obs.met.workloads.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	row := func(id string) (WorkloadStatus, bool) {
		w, ok := a.machine().Workload(id)
		if !ok {
			return WorkloadStatus{}, false
		}
		return WorkloadView(w, a.me.self), true // Status fills Running; NoStandby is set below
	}
	sus, why := a.machine().ClockSuspect()
	a.view.mu.Lock()
	ws := a.view.status.Workloads
	rebuild := a.view.idx == nil || now.Sub(a.view.built) >= statusRebuildEvery
	for id := range a.view.ids {
		_, listed := a.view.idx[id]
		if _, tracked := a.machine().State(id); listed && !tracked {
			rebuild = true // a removed workload: rebuild the list
			break
		}
	}
	if rebuild {
		ids := a.machine().IDs()
		ws = make([]WorkloadStatus, 0, len(ids))
		a.view.idx = make(map[string]int, len(ids))
		for _, id := range ids {
			if r, ok := row(id); ok {
				a.view.idx[id] = len(ws)
				ws = append(ws, r)
			}
		}
		a.view.built = now
	} else {
		// New workloads are appended (the machine lists workloads in the
		// order they came, as a rebuild does): thousands of grants arriving
		// used to rebuild the whole list on every refresh.
		for id := range a.view.ids {
			r, ok := row(id)
			if !ok {
				continue
			}
			if i, listed := a.view.idx[id]; listed {
				ws[i] = r
			} else {
				a.view.idx[id] = len(ws)
				ws = append(ws, r)
			}
		}
	}
	clear(a.view.ids)
	// Whether a standby is alive changes without any state change: every
	// refresh sets it on every held row.
	noStandby := 0
	for i := range ws {
		w := &ws[i]
		w.NoStandby = w.Primary == a.me.self && lease.State(w.State).Holding() && len(w.Standbys) > 0 && !a.machine().StandbyAlive(w.ID)
		if w.NoStandby {
			noStandby++
		}
	}
	a.view.status = Status{Provider: a.me.keys.Npub(), Source: "agent", Now: now, Synced: !a.machine().AwaitingSync(), Workloads: ws,
		ClockSuspect: sus, ClockWhy: why, Draining: a.machine().Draining(), Containment: a.work.containment.Summary, ContainmentWarning: a.work.containment.Warning,
		Isolation: a.work.isolation.Summary, IsolationWarning: a.work.isolation.Warning}
	a.view.counts = counts
	a.view.mu.Unlock()
	// Quorum of this provider and of every holder it watches (ws is written
	// only here, on the machine goroutine: no lock needed to read it).
	providers := map[string]bool{a.me.self: true}
	for i := range ws {
		providers[ws[i].Primary] = true
	}
	a.obs.met.noStandby.Set(float64(noStandby))
	for p := range providers {
		q := 0.0
		if a.machine().HasQuorum(now, p) {
			q = 1
		}
		a.obs.met.quorum.WithLabelValues(p).Set(q)
		if p == a.me.self {
			a.obs.met.ownQuorum.Set(q)
		}
	}
}

// stateCounts are the workloads by state at the last status refresh.
func (a *Agent) stateCounts() map[lease.State]int {
	a.view.mu.Lock()
	defer a.view.mu.Unlock()
	return maps.Clone(a.view.counts)
}

// Track adds a lease grant directly (tests and the demo; operators use
// QueueGrant). It is safe to call while Run runs.
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
