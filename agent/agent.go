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
	reads     claimReads     // claim reads waiting to be batched (claimreads.go)
	publishes claimPublishes // claim publishes waiting for a publisher (claimpublish.go)
	wg        sync.WaitGroup
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
	watch  []lease.RelayWatch  // the relays' live streams as evidence of silence
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
	goLoop("claim-publishes", a.claimPublishLoop)
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
