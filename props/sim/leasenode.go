package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"provideragent/driver"
	"provideragent/driver/drivertest"
	"provideragent/lease"
)

// The simulator's instances of the driver's types: an outbox row carries a
// simulated event, and a step has no rows of its own.
type (
	noRows    = struct{}
	simDriver = driver.Driver[Event, noRows]
	simShell  = driver.Shell[Event, noRows]
	simTurn   = driver.Turn[Event, noRows]
	simBatch  = driver.Batch[Event, noRows]
	simStore  = drivertest.MemStore[Event, noRows]
)

// leaseDisk is what survives an agent crash: the driver's database (a
// drivertest.MemStore: workload rows, the machine's metadata, claim times,
// the subscription cursor), the outbox's receipts, and each durable
// workload's checkpoint file.
type leaseDisk struct {
	store  simStore
	outbox []outboxEntry
	files  map[string]*ckptFile
}

type timerRespawn struct {
	workload string
	epoch    uint64
	attempt  int
}

// LeaseNode is one simulated provider's agent around the one driver
// (provideragent/driver) the agent runs: it converts simulated events into
// driver inputs and the driver's effects into simulated actions, and keeps
// nothing of the driver's decisions itself. Like the agent's loop, it
// tracks the grant at first boot, feeds every verified event from every
// relay (its own heartbeats included) as one step and ticks in it, ticks
// every TickInterval, saves every driver.SaveEvery, publishes heartbeats
// listing Held() every HeartbeatInterval (beats.go), runs the claim-step
// feedback (claimstep.go), and sends the outbox rows the driver committed
// (outbox.go). Turns, saves, the release of process operations and the
// fence gate (a revocation leaves only once its workload's stop completed)
// are the agent's own: a driver.Shell around the driver, over simulated
// processes (perform.go). Its database is a simStore that survives crashes:
// what a restart restores is exactly what the driver committed. With a
// checkpoint policy in the grant (checkpoint.go, move.go) it also runs the
// copy as a counter that checkpoints every CheckpointEvery, publishes
// records while Live, restores a new epoch's state from the relays, and
// performs planned moves (Sim.Move).
//
// Faults aimed at the driver's seams (dbfaults.go): ArmCommitFailure (commits refused),
// ArmCommitStall (each commit waits for the database, stalling the loop,
// and fails), ArmMidStepCrash (the agent dies between a step's commit and
// its deferred effects, or, ArmCrashBeforeCommit, between its stops and
// its commit). A crash between saves loses the relay tables saved since
// the last one, as the agent's does.
type LeaseNode struct {
	cfg  lease.Config
	spec lease.Spec
	self ProviderID
	key  string
	keys map[string]ProviderID

	disk   *leaseDisk
	d      *simDriver // nil while crashed
	sh     *simShell  // the shell around d, as the agent's: turns, saves, process operations, the fence gate
	nextHB time.Time
	pubs   map[EventID]*claimPub
	reads  map[QueryID]*claimRead
	err    error

	// env and now of the callback under way: the driver performs effects
	// synchronously, within it.
	env Env
	now time.Time // the latest local time seen

	// halted drops every input until the simulator crashes the agent.
	halted bool
	// flushGen names the one outbox retry timer that counts (later ones
	// replace earlier ones).
	flushGen uint64
	// reissuing is set while Boot performs the restored machine's effects
	// (not new decisions: no TakeoverClaim report).
	reissuing bool
	// shards splits every beat over this many events (0 or 1: one).
	shards int
	// Armed faults (local times): commits refused until failUntil; each
	// commit attempt stalls the loop for its wait and fails until
	// stallUntil; a crash at the next step's commit (crashDown >= 0),
	// before it (crashBefore) or after it.
	failUntil  time.Time
	stallUntil time.Time
	crashDown  time.Duration
	crashArmed bool
	// crashIf, when set, narrows an armed crash to a commit writing a row
	// it accepts (tests aim at one step).
	crashIf     func(lease.WorkloadSnapshot) bool
	crashBefore bool

	// Durable workloads (checkpoint.go, move.go): the checkpoint cadence;
	// the copies this node started (the processes: gone with the agent);
	// restore reads, by query; moves under way, by workload; and the
	// journal checkers read (kept across crashes).
	ckptEvery time.Duration
	copies    map[string]*ckptCopy
	restores  map[QueryID]*restoreRead
	moves     map[string]*moveOp
	journal   []CheckpointNote
}

// NewLeaseNode returns provider self's node for spec under cfg.
func NewLeaseNode(cfg lease.Config, spec lease.Spec, self ProviderID, providers int) *LeaseNode {
	n := &LeaseNode{cfg: cfg, spec: spec, self: self, key: ProviderKey(self), keys: map[string]ProviderID{}, disk: &leaseDisk{files: map[string]*ckptFile{}}}
	for i := 0; i < providers; i++ {
		n.keys[ProviderKey(ProviderID(i))] = ProviderID(i)
	}
	n.disk.store.Refuse = n.refuse
	n.disk.store.Wrote = n.wrote
	return n
}

// Err returns the first driver error (an Open that failed, a start before
// its step was persisted, a restore that lost a committed workload).
func (n *LeaseNode) Err() error { return n.err }

func (n *LeaseNode) fail(err error) {
	if n.err == nil {
		n.err = err
		if n.env != nil {
			n.env.Logf("DRIVER ERROR: %v", err)
		}
	}
}

func (n *LeaseNode) name(key string) string {
	if p, ok := n.keys[key]; ok {
		return fmt.Sprintf("P%d", p)
	}
	if key == "" {
		return "-"
	}
	return key[:8]
}

// enter sets the callback's env and time; it reports whether the node may
// act (it is up and not halted).
func (n *LeaseNode) enter(env Env, now time.Time) bool {
	n.env = env
	n.now = maxTime(n.now, now)
	return n.d != nil && !n.halted
}

// Boot implements Node: it opens the driver on what the database holds.
func (n *LeaseNode) Boot(env Env, now time.Time) {
	n.env = env
	n.halted = false
	n.pubs = map[EventID]*claimPub{}
	n.reads = map[QueryID]*claimRead{}
	n.copies = map[string]*ckptCopy{}
	n.restores = map[QueryID]*restoreRead{}
	n.moves = map[string]*moveOp{}
	n.nextHB = now
	n.now = maxTime(n.now, now)
	d, err := driver.Open(context.Background(), now, driver.Config{}, n.cfg, n.key, driver.Deps[Event, noRows]{
		Store: &n.disk.store, Outbox: simOutbox{n}, Performer: simPerformer{n}, Events: simEvents{n},
	})
	if err != nil {
		n.fail(fmt.Errorf("open driver: %w", err))
		return
	}
	n.d = d
	n.sh = driver.NewShell(d, now, driver.ShellConfig{FenceRecheck: fenceRetry}, driver.ShellDeps{
		Processes: simProcesses{n}, Cursor: func() int64 { return n.disk.store.Cursor },
	})
	n.armCheckpoints(now)
	n.checkRestored()
	n.checkMoveLost()
	if !d.Restored() {
		_ = n.sh.Start(context.Background(), now) // nothing restored: it opens the outbox
		t := n.sh.Begin(now)
		if fed := t.Feed(driver.Input{Grant: &n.spec}); fed.Err != nil {
			n.fail(fmt.Errorf("track: %w", fed.Err))
			return
		}
		n.commit(t)
		return
	}
	env.Logf("restored from the database: %s", n.Describe())
	n.reissuing = true
	if err := n.sh.Start(context.Background(), now); err != nil && !errors.Is(err, driver.ErrUnpersisted) {
		n.env.Logf("commit: %v", err)
	}
	n.reissuing = false
	n.flushOutbox()
}

// checkRestored fails the node when the restored machine lacks a workload
// the database holds (a row in a holding state): a restart must bring back
// every committed workload.
func (n *LeaseNode) checkRestored() {
	for id, r := range n.disk.store.Rows {
		if !r.State.Holding() {
			continue
		}
		if st, ok := n.d.Machine().State(id); !ok {
			n.fail(fmt.Errorf("restore dropped %s, which the database holds (%s at epoch %d)", id, r.State, r.Epoch))
		} else if !st.Holding() && st != lease.StateFenced && st != lease.StateEvicted {
			n.fail(fmt.Errorf("restore turned %s from %s into %s", id, r.State, st))
		}
	}
}

// commit commits a turn; a failure is the driver's to hold and retry.
func (n *LeaseNode) commit(t *simTurn) {
	_ = t.Commit(context.Background())
}

// step feeds in as one turn at now, ticked when tick is set, and commits
// it.
func (n *LeaseNode) step(now time.Time, in driver.Input, tick bool) driver.Fed {
	t := n.sh.Begin(now)
	fed := t.Feed(in)
	if tick {
		t.Tick()
	}
	n.commit(t)
	return fed
}

// mark feeds what relay r's stream showed as one turn at now.
func (n *LeaseNode) mark(now time.Time, m driver.MarkKind, r RelayID, tick bool) {
	t := n.sh.Begin(now)
	t.Mark(driver.Mark{Kind: m, Relay: RelayURL(r)})
	if tick {
		t.Tick()
	}
	n.commit(t)
}

// Crash implements Node: the driver and everything in memory are lost;
// the database (what the driver committed) and the outbox's receipts
// survive.
func (n *LeaseNode) Crash() {
	n.d, n.sh, n.pubs, n.reads = nil, nil, nil, nil
	n.copies, n.restores, n.moves = nil, nil, nil
	n.failUntil, n.stallUntil, n.crashArmed = time.Time{}, time.Time{}, false
}

// Tick implements Node: a heartbeat when one is due, the save when due,
// and a step that ticks (a held step is retried by it when due).
func (n *LeaseNode) Tick(env Env, now time.Time) {
	if !n.enter(env, now) {
		return
	}
	n.beatIfDue(now)
	n.step(now, driver.Input{}, true)
	if n.d != nil && !n.halted {
		_, _ = n.sh.SaveIfDue(context.Background(), now)
	}
}

// Since implements Node: the cursor less the margin the agent allows for
// signers' clock offsets and relay delay, never past now (the agent's
// agent.since).
func (n *LeaseNode) Since() int64 {
	c := min(n.disk.store.Cursor, n.now.Unix())
	if c <= 0 {
		return 0
	}
	return max(c-int64((n.cfg.MaxSkew+n.cfg.RelayDelay)/time.Second)-1, 1)
}

// admit is the agent's ingest for claims and revocations: the signature
// verifies, the author is a key the lease names, and the event is not from
// the future. Only an admitted event moves the cursor.
func (n *LeaseNode) admit(now time.Time, ev *Event) bool {
	if _, named := n.keys[ProviderKey(ev.Author)]; ev.Forged || !named {
		return false
	}
	return !time.Unix(ev.CreatedAt, 0).After(now.Add(n.cfg.MaxSkew))
}

// Receive implements Node: one step with the event's input and a tick.
func (n *LeaseNode) Receive(env Env, now time.Time, r RelayID, ev *Event) {
	if !n.enter(env, now) || ev.Forged {
		return
	}
	if ev.Kind != KindHeartbeat {
		if !n.admit(now, ev) {
			return
		}
		n.disk.store.Cursor = max(n.disk.store.Cursor, ev.CreatedAt)
	}
	author := ProviderKey(ev.Author)
	var in driver.Input
	switch b := ev.Body.(type) {
	case LeaseHeartbeat:
		in.Heartbeat = &lease.Heartbeat{
			Provider:  author,
			Relay:     RelayURL(r),
			EventID:   fmt.Sprintf("%016x", uint64(ev.ID)),
			CreatedAt: time.Unix(ev.CreatedAt, 0),
			Listed:    true,
			Workloads: b.Workloads,
			Shard:     b.Shard,
			Shards:    b.Shards,
		}
	case AnchorHeartbeat:
		// A Paygress v1 peer: its heartbeat lists no workloads.
		in.Heartbeat = &lease.Heartbeat{
			Provider:  author,
			Relay:     RelayURL(r),
			EventID:   fmt.Sprintf("%016x", uint64(ev.ID)),
			CreatedAt: time.Unix(ev.CreatedAt, 0),
		}
	case AnchorPromotion, LeaseClaim, LeaseAnnouncement:
		c, _ := claimInput(r, ev)
		in.Claims = []lease.PromotionClaim{c}
	case LeaseRevocation:
		in.Revocation = &lease.Revocation{
			Workload: b.Workload, Signer: author, Epoch: b.Epoch,
			Successor: b.Successor, Standbys: b.Standbys, Reason: b.Reason, CreatedAt: time.Unix(ev.CreatedAt, 0),
			QuorumAt: unixMilliOrZero(b.QuorumAt), StateURI: b.StateURI,
		}
	default:
		return
	}
	n.step(now, in, true)
}

// Connected implements Node: the relay's stream is new, so what came
// before it may be missing (RelayGap) until its EOSE.
func (n *LeaseNode) Connected(env Env, now time.Time, r RelayID) {
	if !n.enter(env, now) {
		return
	}
	n.mark(now, driver.MarkGap, r, false)
}

// EOSE implements Node.
func (n *LeaseNode) EOSE(env Env, now time.Time, r RelayID) {
	if !n.enter(env, now) {
		return
	}
	n.mark(now, driver.MarkSynced, r, true)
	n.flushOutbox()
}

// PublishResult implements Node.
func (n *LeaseNode) PublishResult(env Env, now time.Time, r RelayID, id EventID, ok bool) {
	if !n.enter(env, now) {
		return
	}
	if ok {
		for i := range n.disk.outbox {
			if n.disk.outbox[i].Ev.ID == id {
				n.disk.outbox[i].Pending[r] = false
			}
		}
		n.pruneOutbox()
	}
	if mv := n.moveFor(id); mv != nil {
		n.movePublished(now, mv, ok)
		return
	}
	if p := n.pubs[id]; p != nil {
		n.claimAnswered(now, id, p, ok)
	}
}

// QueryResult implements Node: a claim read's answers go to readAnswered,
// a restore read's to restoreAnswer.
func (n *LeaseNode) QueryResult(env Env, now time.Time, r RelayID, q QueryID, evs []*Event, ok bool) {
	if !n.enter(env, now) {
		return
	}
	if rr := n.restores[q]; rr != nil {
		delete(n.restores, q)
		n.restoreAnswer(now, r, rr, evs, ok)
		return
	}
	if rd := n.reads[q]; rd != nil {
		delete(n.reads, q)
		n.readAnswered(now, r, rd, evs, ok)
	}
}

// Timer implements Node.
func (n *LeaseNode) Timer(env Env, now time.Time, tag any) {
	if !n.enter(env, now) {
		return
	}
	switch t := tag.(type) {
	case timerRead:
		n.readClaims(t)
	case timerRespawn:
		// The restart happened with the effect; this is its report.
		n.step(now, driver.Input{Respawn: &lease.RespawnResult{Workload: t.workload, Attempt: t.attempt, OK: true}}, false)
	case timerOutbox:
		if t.gen == n.flushGen {
			n.flushOutbox()
		}
	case timerCheckpoint:
		n.checkpoint(now)
	case timerRestore:
		n.queryRestore(now, t.req)
	case timerRestoreRetry:
		if !t.rd.completed {
			n.queryRecords(t.rd, t.r)
		}
	case timerMove:
		if mv := n.moves[t.workload]; mv != nil && mv.rec.ID == t.rec && !mv.done {
			n.abortMove(mv, fmt.Sprintf("final record accepted by %d relays within %v, fewer than %d", mv.acks, MoveTimeout, n.cfg.M))
		}
	}
}

// Exited implements Node: ProcessExited.
func (n *LeaseNode) Exited(env Env, now time.Time, w string, epoch uint64) {
	if !n.enter(env, now) {
		return
	}
	delete(n.copies, w) // it crashed: its file keeps its last checkpoint
	n.step(now, driver.Input{Exit: &lease.ProcessExit{Workload: w, Epoch: epoch, Reason: "exit status 1"}}, false)
}

var _ Node = (*LeaseNode)(nil)

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
