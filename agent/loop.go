package agent

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent/store"
	"provideragent/courier"
	"provideragent/heartbeat"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

// maxBatch bounds how many inputs one machine step folds into one commit.
const maxBatch = 256

// closedChan is always ready: a select case on it competes fairly with the
// others (the backlog's turns between inputs and ticks).
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// machineLoop owns the lease machine: it feeds inputs, ticks, persists each
// step with its outbox rows in one transaction, then performs the effects.
// Bulk work takes turns with inputs and ticks (a Go select picks among the
// ready cases at random): the backlog of a big step one commitBatch at a
// time, operator commands one cmdBatch at a time.
func (a *Agent) machineLoop(ctx context.Context) error {
	if len(a.restored) > 0 {
		// Restore's effects first (a StopWorkload for every workload not
		// held here), then Outstanding's: lease/doc.go's restart protocol.
		// The stops are performed even if the commit fails (then the rest
		// is held and retried like any step).
		effs := a.restored
		a.restored = nil
		_ = a.commit(ctx, a.now(), effs, nil)
	}
	// The outbox may send now: every restored stop is performed or queued
	// (the fence gate holds a revocation until its stop finished).
	close(a.restoredDone)
	a.loopStart = a.now()
	a.lastStep.Store(a.loopStart.UnixNano())
	tick := time.NewTicker(a.cfg.TickInterval)
	defer tick.Stop()
	cmds := time.NewTicker(time.Second)
	defer cmds.Stop()
	save := time.NewTicker(5 * time.Second)
	defer save.Stop()
	a.applyCommands(ctx)
	for {
		// holdInputs (tests only) stops feeding inputs while ticks, saves
		// and shutdown go on: inputs then wait in their channel, ingested
		// but not applied.
		inputs, beats := a.inputs, a.beats
		if a.holdInputs.Load() {
			inputs, beats = nil, nil
		}
		var backlogTurn, cmdsTurn <-chan struct{}
		if !a.bl.empty() {
			backlogTurn = closedChan
		}
		if a.cmdsMore {
			cmdsTurn = closedChan
		}
		var began time.Time
		kind := ""
		select {
		case <-ctx.Done():
			return a.saveMetaRun(context.WithoutCancel(ctx), false)
		case in := <-beats:
			began = time.Now()
			kind = "beats"
			a.step(ctx, in, false)
		case in := <-inputs:
			began = time.Now()
			kind = "inputs"
			a.step(ctx, in, false)
		case <-backlogTurn:
			began = time.Now()
			kind = "backlog"
			_ = a.drainBacklog(ctx, true)
			a.lastStep.Store(a.now().UnixNano())
		case <-tick.C:
			began = time.Now()
			kind = "tick"
			// The heartbeats that arrived during a long turn count before
			// the tick judges quorum (they carry their arrival times).
			for len(a.beats) > 0 {
				a.step(ctx, <-a.beats, true)
			}
			now := a.now()
			effs := a.syncRelays(now)
			effs = append(effs, a.m.Tick(now)...)
			_ = a.commit(ctx, now, effs, nil)
			a.lastStep.Store(now.UnixNano())
			a.watchQuorum(now)
			if a.heldDirty {
				a.publishHeld()
			}
			a.updateSubs(now)
			if now.Sub(a.lastStat) >= time.Second || (a.statusDirty && now.Sub(a.lastStat) >= statusEvery) {
				a.refreshStatus(now)
			}
		case <-cmds.C:
			began = time.Now()
			kind = "cmds"
			a.applyCommands(ctx)
		case <-cmdsTurn:
			began = time.Now()
			kind = "cmdsTurn"
			a.applyCommands(ctx)
		case <-save.C:
			began = time.Now()
			kind = "save"
			if err := a.saveMeta(ctx); err != nil {
				a.logger.Error("save machine", "err", err)
			}
		}
		a.noteTurn(kind, time.Since(began))
	}
}

// step feeds in and the inputs waiting after it, heartbeats first (only
// heartbeats when beatsOnly), up to maxBatch, as one step, and commits it.
func (a *Agent) step(ctx context.Context, in input, beatsOnly bool) {
	now := a.now()
	var effs []lease.Effect
	var cursors []store.Token
	effs, cursors = a.feed(now, in, effs, cursors)
drain:
	for i := 1; i < maxBatch; i++ {
		select {
		case in = <-a.beats:
		default:
			if beatsOnly {
				break drain
			}
			select {
			case in = <-a.inputs:
			default:
				break drain
			}
		}
		effs, cursors = a.feed(now, in, effs, cursors)
	}
	// Errors are logged and counted by commitStep; the step is held and
	// retried, its cursor tokens finished only once persisted.
	_ = a.commitStep(ctx, now, effs, cursors, nil, true)
	a.lastStep.Store(now.UnixNano())
	if a.statusDirty && now.Sub(a.lastStat) >= statusEvery {
		a.refreshStatus(now)
	}
}

// slowTurn is the longest a turn of the machine loop may take before
// inputs are late (issue 10's bound for a mass transition): a longer one
// is a WARN, at most once per slowTurnLogEvery.
const (
	slowTurn         = 250 * time.Millisecond
	slowTurnLogEvery = 10 * time.Second
)

// noteTurn records how long a turn of the machine loop took (StepMax) and
// warns, rate-limited, when it kept inputs waiting longer than slowTurn.
func (a *Agent) noteTurn(kind string, d time.Duration) {
	if int64(d) > a.stepMax.Load() {
		a.stepMax.Store(int64(d))
	}
	if d <= slowTurn {
		return
	}
	a.slowTurns++
	if now := time.Now(); now.Sub(a.slowTurnLogged) >= slowTurnLogEvery {
		a.logger.Warn("machine loop turn slow: inputs waited", "kind", kind, "took", d.Round(time.Millisecond),
			"slow_turns", a.slowTurns, "backlog", a.bl.len())
		a.slowTurnLogged, a.slowTurns = now, 0
	}
}

// statusEvery is how often at most the status document is rebuilt while
// transitions happen.
const statusEvery = 100 * time.Millisecond

// StepMax returns the longest turn of the machine loop (a step with its
// commit, a backlog batch, a tick, a save) since the last ResetStepMax:
// how long inputs waited at worst (the mass-evict-step-ms benchmark).
func (a *Agent) StepMax() time.Duration { return time.Duration(a.stepMax.Load()) }

// ResetStepMax starts a new StepMax window.
func (a *Agent) ResetStepMax() { a.stepMax.Store(0) }

// feed applies one input to the machine and appends its effects.
func (a *Agent) feed(now time.Time, in input, effs []lease.Effect, cursors []store.Token) ([]lease.Effect, []store.Token) {
	if in.hasTok {
		cursors = append(cursors, in.cursorTok)
	}
	switch {
	case in.hb != nil:
		effs = append(effs, a.m.ObserveHeartbeat(now, *in.hb)...)
		if in.hb.Provider != a.self {
			// A holder's heartbeat refreshes the claim times of what it
			// lists (saveMeta writes those rows).
			for _, we := range in.hb.Workloads {
				if _, ok := a.m.State(we.ID); ok {
					a.dirty.add(we.ID)
					if i, ok := a.statusIdx[we.ID]; ok && a.status.Workloads[i].Epoch != we.Epoch {
						a.statusIDs.add(we.ID) // a standby learns the epoch held
						a.statusDirty = true
					}
				}
			}
		}
	case in.rev != nil:
		a.dirty.add(in.rev.WorkloadID)
		a.statusIDs.add(in.rev.WorkloadID)
		a.statusDirty = true
		w, _ := a.m.Workload(in.rev.WorkloadID)
		r := heartbeat.RevocationInput(in.rev, w)
		a.met.revocations.WithLabelValues("received").Inc()
		if r.Signer != a.self {
			a.emit("received", r.Workload, "revocation of epoch %d from %s, successor %s", r.Epoch, short(r.Signer), short(r.Successor))
		}
		effs = append(effs, a.m.ObserveRevocation(now, r)...)
	case in.grant != nil:
		a.dirty.add(in.grant.ID)
		a.subs.dirty = true
		e, err := a.m.Track(now, *in.grant)
		if err != nil {
			a.logger.Warn("lease grant refused", "workload", in.grant.ID, "err", err)
		} else if len(e) > 0 {
			a.refreshPolicy([]string{in.grant.ID})
		}
		effs = append(effs, e...)
	case in.exit != nil:
		a.dirty.add(in.exit.ID)
		effs = append(effs, a.m.ProcessExited(now, lease.ProcessExit{Workload: in.exit.ID, Epoch: in.exit.Epoch, Reason: in.exit.Reason})...)
	case in.respawn != nil:
		a.dirty.add(in.respawn.Workload)
		a.met.respawns.Inc()
		effs = append(effs, a.m.RespawnDone(now, *in.respawn)...)
	case in.claimAck != nil:
		a.dirty.add(in.claimAck.Workload)
		effs = append(effs, a.m.ClaimPublished(now, *in.claimAck)...)
	case in.clock != nil:
		effs = append(effs, a.clockVerdict(now, *in.clock)...)
	}
	var rivals map[string]bool
	if in.claimRead != nil {
		rivals = map[string]bool{}
	}
	for _, pr := range in.claims {
		// As on the wire: lease decides what a Paygress announcement
		// (EpochUnknown) counts as, and records one that competes as a
		// rival, which ClaimsRead sees; Competing counts epoch claims.
		c := heartbeat.ClaimInput(pr.p, pr.relay)
		a.dirty.add(c.Workload)
		a.statusIDs.add(c.Workload)
		a.statusDirty = true
		a.rivalWatch.add(c.Workload) // a rival may be adopted by a later Tick
		effs = append(effs, a.m.ObserveClaim(now, c)...)
		if r := in.claimRead; r != nil && c.Workload == r.Workload && c.Claimer != a.self && c.Active && c.Epoch >= r.Epoch {
			rivals[c.Claimer] = true
		}
	}
	if in.claimRead != nil {
		a.dirty.add(in.claimRead.Workload)
		r := *in.claimRead
		r.Competing = len(rivals)
		a.emit("read", r.Workload, "read claims for epoch %d on %d relays: %d competing", r.Epoch, r.Relays, r.Competing)
		effs = append(effs, a.m.ClaimsRead(now, r)...)
	}
	return effs, cursors
}

// relayClaim is a verified promotion claim (kind 38386) as one relay served
// it; feed converts it with heartbeat.ClaimInput.
type relayClaim struct {
	p     *heartbeat.Promotion
	relay string
}

// syncRelays reports relays that delivered EOSE (rule 10), once the events
// they delivered before it have been fed.
func (a *Agent) syncRelays(now time.Time) []lease.Effect {
	if !a.m.AwaitingSync() || len(a.received) > 0 || a.routed.Load() > 0 || len(a.raw) > 0 || len(a.inputs) > 0 || len(a.beats) > 0 {
		return nil
	}
	var out []lease.Effect
	for _, r := range a.pool.Status() {
		if r.EOSE && !a.synced[r.URL] {
			a.synced[r.URL] = true
			out = append(out, a.m.RelaySynced(now, r.URL)...)
		}
	}
	if !a.m.AwaitingSync() {
		a.emit("sync", "", "synced with %d relays: restored workloads may resume", len(a.synced))
	}
	return out
}

// watchQuorum logs changes of this provider's own relay quorum and of
// relay connectivity, once per change (machine goroutine, every tick):
// losing quorum and regaining it are WARN lines (the first quorum after
// start is INFO), and so is having no relay connected at all (checked once
// PublishTimeout after the loop started, so that the first connections
// have time to come up); connections coming back after that are INFO.
func (a *Agent) watchQuorum(now time.Time) {
	q := a.m.HasQuorum(now, a.self)
	if q != a.hadQuorum {
		a.hadQuorum = q
		up := a.connected()
		switch {
		case q && !a.everQuorum:
			a.everQuorum = true
			a.logger.Info("relay quorum reached: own heartbeats seen on enough relays", "quorum", a.cfg.Lease.M, "relays", a.cfg.Lease.N, "connected", up)
		case q:
			a.logger.Warn("relay quorum regained: own heartbeats seen on enough relays again", "quorum", a.cfg.Lease.M, "relays", a.cfg.Lease.N, "connected", up)
		default:
			a.logger.Warn("relay quorum lost: own heartbeats seen on too few relays", "quorum", a.cfg.Lease.M, "relays", a.cfg.Lease.N, "connected", up)
		}
		if q {
			a.emit("quorum", "", "own heartbeats seen on >= %d of %d relays: quorum", a.cfg.Lease.M, a.cfg.Lease.N)
		} else {
			a.emit("quorum", "", "own heartbeats on fewer than %d relays: quorum LOST", a.cfg.Lease.M)
		}
	}
	if now.Sub(a.loopStart) < a.cfg.PublishTimeout {
		return
	}
	none := a.connected() == 0
	if none == a.noRelays {
		return
	}
	a.noRelays = none
	if none {
		a.logger.Warn("no relay connected", "relays", a.cfg.Lease.N)
		a.emit("relays", "", "no relay connected")
	} else {
		a.logger.Info("relay connected again", "connected", a.connected(), "relays", a.cfg.Lease.N)
		a.emit("relays", "", "relay connected again")
	}
}

// commit is commitStep for a step without cursor tokens.
func (a *Agent) commit(ctx context.Context, now time.Time, effs []lease.Effect, extra func(tx *sql.Tx) error) error {
	return a.commitStep(ctx, now, effs, nil, extra, true)
}

// commitStep persists one machine step and performs its effects: lease/doc.go's
// driver protocol, with one departure so that fencing never waits on the
// database.
//
//   - Stops, and the effects that only report (EnteredState, Failed,
//     QuorumReport), are performed first, before any database access.
//     Stopping is always safe: a crash before the commit restores the older
//     state and workloads die with the agent, so a stop performed early is a
//     crash one step earlier. Neither a failed commit (disk full) nor a write
//     lock held by another process delays or loses a fence.
//   - The workloads the effects concern (their current snapshots), the
//     outbox rows of their outbox effects (revocations, withdrawn markers,
//     announcements) and the created_at of their claims
//     are committed in one transaction that waits at most CommitWait for the
//     database.
//   - Only then are the effects that need their state persisted performed
//     (starts, respawns, claim-step requests; revocations count as queued),
//     and the cursor tokens of the step's inputs finished. A start the
//     same step then stops is dropped.
//   - When the commit fails the step is held (unpersisted): the next commit
//     that succeeds writes it too, and the agent retries every
//     commitRetryEvery even without new effects. Held starts and claim-step
//     requests are then re-derived from the machine's state of that moment
//     rather than replayed. While steps are held their inputs' cursor tokens
//     stay open, so the subscription cursor cannot pass them.
//
// The agent never exits because the database stays unwritable: it keeps
// fencing and reports the failure (/healthz, agent_step_errors_total, an
// ERROR log once per episode). run=false (shutdown) persists without
// performing the deferred effects: a restart re-derives them (Restore,
// Outstanding, RelaySynced).
func (a *Agent) commitStep(ctx context.Context, now time.Time, effs []lease.Effect, toks []store.Token, extra func(tx *sql.Tx) error, run bool) error {
	if len(effs) == 0 && extra == nil && a.pend.empty() {
		a.finish(toks)
		return nil
	}
	a.performEarly(ctx, now, effs)
	a.refreshPolicy(effectIDs(effs))
	pieces, g := a.bl.split(now, effs, toks)
	if len(pieces) > commitBatch {
		// The rest waits in the backlog, committed one batch per turn of
		// the machine loop (backlog.go).
		a.bl.push(pieces[commitBatch:])
		pieces = pieces[:commitBatch]
	}
	var early []store.Token
	if len(pieces) == 0 {
		early = g.toks // no piece: the step's tokens go with this commit
	}
	return a.commitPieces(ctx, now, pieces, early, extra, run)
}

// drainBacklog commits the next batch of the backlog (machine goroutine).
func (a *Agent) drainBacklog(ctx context.Context, run bool) error {
	return a.commitPieces(ctx, a.now(), a.bl.next(commitBatch), nil, nil, run)
}

// commitPieces persists pieces of steps (and extra), then performs their
// deferred effects: the second half of commitStep. toks are tokens to
// finish with the commit besides those of the steps the pieces complete.
func (a *Agent) commitPieces(ctx context.Context, now time.Time, pieces []*piece, toks []store.Token, extra func(tx *sql.Tx) error, run bool) error {
	if len(pieces) == 0 && extra == nil && a.pend.empty() {
		a.finish(toks)
		return nil
	}
	start := time.Now()
	timed, effs, ids := flatten(pieces)
	rows := a.outboxRows(ctx, timed)
	if d := time.Since(start); d > slowTurn {
		a.logger.Debug("outbox events built slowly", "pieces", len(pieces), "effects", len(effs), "rows", len(rows), "took", d)
	}
	toks = append(toks, done(pieces)...)

	held := !a.pend.empty()
	if held {
		a.pend.add(effs, rows, toks)
		if extra == nil && now.Before(a.pend.retryAt) {
			return fmt.Errorf("commit step: %w", ErrUnpersisted)
		}
	}
	var later []lease.Effect
	writeIDs, writeRows := ids, rows
	if held {
		later = a.pend.effects(a.m)
		writeIDs, writeRows = a.pend.ids, a.pend.rows
	} else {
		later = lease.AfterCommit(effs)
	}
	err := a.persist(ctx, now, writeIDs, writeRows, later, extra, run)
	a.noteWrite(err)
	if err != nil {
		if !held {
			a.pend.add(effs, rows, toks)
		}
		a.met.stepErrors.Inc()
		switch {
		case a.pend.empty():
			// Nothing held (an operator command alone): its caller reports it.
		case a.pend.since.IsZero():
			a.pend.since = now
			a.logger.Error("database write failed: fencing continues; starts, claims and revocations wait until a step persists",
				"err", err, "retry_every", commitRetryEvery)
			a.emit("persist", "", "step not persisted (%v): stops performed, the rest held back", err)
		default:
			a.logger.Debug("database write still failing", "err", err, "held_steps", a.pend.steps)
		}
		a.pend.retryAt = now.Add(commitRetryEvery)
		return fmt.Errorf("commit step: %w", err)
	}
	if held {
		a.logger.Warn("database writable again: held machine steps persisted", "steps", a.pend.steps,
			"after", now.Sub(a.pend.since).Round(time.Millisecond))
		a.emit("persist", "", "%d held steps persisted after %v", a.pend.steps, now.Sub(a.pend.since).Round(time.Millisecond))
		toks = a.pend.toks
		a.pend = unpersisted{}
	}
	a.finish(toks)
	a.met.stepSeconds.Observe(time.Since(start).Seconds())
	return nil
}

// commitRetryEvery is how often held (unpersisted) steps are retried when
// no new step comes.
const commitRetryEvery = time.Second

// persist commits the rows of workloads ids (their current snapshots), the
// outbox rows, the created_at of the claims among later, and extra in one
// transaction that waits at most CommitWait for the database; once it
// committed it performs later when run is set.
func (a *Agent) persist(ctx context.Context, now time.Time, ids []string, rows []outRow, later []lease.Effect, extra func(tx *sql.Tx) error, run bool) error {
	wrows := make([]workloadRow, 0, len(ids))
	for _, id := range ids {
		w, ok := a.m.Workload(id)
		if !ok {
			continue
		}
		r, err := rowOf(&w)
		if err != nil {
			return err
		}
		wrows = append(wrows, r)
	}
	wctx, cancel := context.WithTimeout(ctx, a.cfg.CommitWait)
	defer cancel()
	// created_at of claims and withdrawn markers, strictly increasing per
	// workload (claimtime.go), persisted with the step.
	var stamps []time.Time
	var stamped []string
	for _, r := range rows {
		if r.claimTime != "" {
			stamped = append(stamped, r.claimTime)
		}
	}
	if run {
		for i, e := range later {
			c, ok := e.(lease.PublishClaim)
			if !ok {
				continue
			}
			id := c.ID
			at, err := a.claimTimes.next(wctx, a.st, id, now)
			if err != nil {
				return err
			}
			if stamps == nil {
				stamps = make([]time.Time, len(later))
			}
			stamps[i] = at
			stamped = append(stamped, id)
		}
	}
	tTx := time.Now()
	defer func() {
		if d := time.Since(tTx); d > slowTurn {
			a.logger.Debug("step commit slow", "rows", len(wrows), "outbox", len(rows), "later", len(later), "took", d)
		}
	}()
	err := sqlitedb.InTxWait(ctx, a.db, a.cfg.CommitWait, func(tx *sql.Tx) error {
		if err := saveWorkloadRows(ctx, a.st, tx, wrows); err != nil {
			return err
		}
		if err := a.claimTimes.save(ctx, a.st, tx, stamped); err != nil {
			return err
		}
		for _, r := range rows {
			if _, err := a.outbox.SendTx(ctx, tx, r.bundle, "agent", courier.SendOptions{IdempotencyKey: r.key, Destination: courier.DestinationNostr}); err != nil &&
				!errors.Is(err, courier.ErrIdempotencyConflict) {
				return fmt.Errorf("queue %s: %w", r.key, err)
			}
		}
		if extra != nil {
			return extra(tx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range wrows {
		a.saved[r.id] = r.hash
		a.dirty.remove(r.id)
	}
	if run {
		a.perform(ctx, now, later, stamps)
	}
	return nil
}

// finish finishes the cursor tokens of persisted inputs.
func (a *Agent) finish(toks []store.Token) {
	for _, t := range toks {
		a.cursor.Done(t)
	}
}

// effectIDs are the workloads effs concern, in first-seen order.
func effectIDs(effs []lease.Effect) []string {
	var ids []string
	seen := map[string]bool{}
	for _, e := range effs {
		if id := e.Workload(); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// performEarly performs the effects of effs that do not wait for the commit.
func (a *Agent) performEarly(ctx context.Context, now time.Time, effs []lease.Effect) {
	var early []lease.Effect
	for _, e := range effs {
		if lease.BeforeCommit(e) {
			early = append(early, e)
		}
	}
	if len(early) > 0 {
		a.perform(ctx, now, early, nil)
	}
}

// outboxRows signs the step's outbox effects (lease.DurabilityOf: the
// revocations, withdrawn markers and announcements) for the outbox, before
// the transaction (no I/O inside it but SQL). A withdrawn marker takes its
// created_at from claimTimes (after its claim's) and the row carries the
// workload whose claim time the commit must save. An event that cannot be
// built is logged and left out: for a revocation, the standby's takeover
// covers one that never comes.
func (a *Agent) outboxRows(ctx context.Context, effs []timedEffect) []outRow {
	// What needs the machine or the database is gathered here, on the
	// machine goroutine; signing, the costly part, runs on every core.
	type job struct {
		e         lease.Effect
		at        time.Time
		stateURI  string
		claimTime string
	}
	var jobs []job
	for _, te := range effs {
		e, now := te.e, te.at
		if lease.DurabilityOf(e) != lease.Outbox {
			continue
		}
		j := job{e: e, at: now}
		switch e := e.(type) {
		case lease.WithdrawClaim:
			tctx, cancel := context.WithTimeout(ctx, a.cfg.CommitWait)
			t, err := a.claimTimes.next(tctx, a.st, e.ID, now)
			cancel()
			if err != nil {
				a.met.stepErrors.Inc()
				a.logger.Error("withdrawn marker", "workload", e.ID, "epoch", e.Epoch, "err", err)
				continue
			}
			j.at, j.claimTime = t, e.ID
		case lease.PublishRevocation:
			w, _ := a.m.Workload(e.ID)
			e.Reason = a.fenceReason(e.Reason, now)
			j.e, j.stateURI = e, w.Spec.StateURI
		}
		jobs = append(jobs, j)
	}
	built := make([]*outRow, len(jobs))
	errs := make([]error, len(jobs))
	build := func(i int) {
		j := jobs[i]
		ev, key, err := a.outboxEvent(j.e, j.at, j.stateURI)
		if err == nil {
			var b []byte
			if b, err = json.Marshal(ev); err == nil {
				built[i] = &outRow{bundle: b, key: key, claimTime: j.claimTime}
				return
			}
		}
		errs[i] = err
	}
	if workers := min(runtime.GOMAXPROCS(0), len(jobs)/8); workers > 1 {
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					build(i)
				}
			}()
		}
		for i := range jobs {
			next <- i
		}
		close(next)
		wg.Wait()
	} else {
		for i := range jobs {
			build(i)
		}
	}
	rows := make([]outRow, 0, len(jobs))
	for i, r := range built {
		if r == nil {
			a.met.stepErrors.Inc()
			a.logger.Error("build outbox event", "effect", jobs[i].e.String(), "err", errs[i])
			continue
		}
		rows = append(rows, *r)
	}
	return rows
}

// perform runs effects in order; backend work and network waits go to
// owned goroutines that report back as inputs. stamps[i] is the created_at
// commit assigned to claim effect i (nil or zero: now).
func (a *Agent) perform(ctx context.Context, now time.Time, effs []lease.Effect, stamps []time.Time) {
	heldChanged := false
	for i, e := range effs {
		at := now
		if i < len(stamps) && !stamps[i].IsZero() {
			at = stamps[i]
		}
		a.met.effects.WithLabelValues(effectType(e)).Inc()
		a.logger.Debug("effect", "effect", e.String())
		switch e := e.(type) {
		case lease.EnteredState:
			from := string(e.From)
			if from == "" {
				from = "new"
			}
			a.met.transitions.WithLabelValues(from, string(e.To)).Inc()
			a.logger.Info("workload state", "workload", e.ID, "from", from, "to", e.To, "epoch", e.Epoch)
			a.statusIDs.add(e.ID)
			if e.From == "" || e.To.Terminal() {
				a.subs.dirty = true
			}
			if a.onEvent != nil {
				a.onEvent(Event{Time: a.now(), Agent: a.name, Kind: "state", Workload: e.ID,
					Detail: fmt.Sprintf("%s -> %s (epoch %d)", from, e.To, e.Epoch), State: string(e.To), Epoch: e.Epoch})
			}
			heldChanged = true
		case lease.StartWorkload:
			w, _ := a.m.Workload(e.ID)
			a.emit("start", e.ID, "start workload process at epoch %d", e.Epoch)
			a.act.enqueue(ctx, e.ID, op{kind: opStart, epoch: e.Epoch, command: w.Spec.Command})
		case lease.StopWorkload:
			if a.act.Fenced(e.ID) {
				// Repeated stops (Restore re-issues one for every workload
				// not held here) are no-ops: nothing runs or is queued.
				a.logger.Debug("stop workload: not running here", "workload", e.ID, "epoch", e.Epoch)
				break
			}
			reason := a.fenceReason(e.Reason, now)
			a.emit("stop", e.ID, "FENCE: stop workload process (epoch %d): %s", e.Epoch, reason)
			a.act.enqueue(ctx, e.ID, op{kind: opStop, epoch: e.Epoch, reason: reason})
		case lease.PublishRevocation:
			a.met.revocations.WithLabelValues("queued").Inc()
			a.emit("revocation", e.ID, "revocation of epoch %d queued in the outbox (successor %s): %s", e.Epoch, short(e.Successor), e.Reason)
		case lease.PublishClaim:
			a.met.promotions.WithLabelValues("claimed").Inc()
			a.goFeedback(ctx, func(ctx context.Context) {
				select {
				case a.claimSem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				defer func() { <-a.claimSem }()
				a.publishClaim(ctx, e, at)
			})
		case lease.WithdrawClaim:
			a.met.promotions.WithLabelValues("withdrawn").Inc()
			a.emit("claim", e.ID, "claim for epoch %d withdrawn: the withdrawn marker is queued in the outbox", e.Epoch)
		case lease.AnnouncePromotion:
			a.met.promotions.WithLabelValues("announced").Inc()
			a.emit("claim", e.ID, "claim for epoch %d won: the Paygress-form announcement is queued in the outbox", e.Epoch)
		case lease.ReadClaims:
			a.reads.add(e) // batched with the other reads due (claimreads.go)
		case lease.AttemptRespawn:
			w, _ := a.m.Workload(e.ID)
			a.emit("respawn", e.ID, "respawn attempt %d (due %s)", e.Attempt, e.At.Format(time.TimeOnly))
			a.act.enqueue(ctx, e.ID, op{kind: opRespawn, epoch: e.Epoch, command: w.Spec.Command, attempt: e.Attempt})
		case lease.Failed:
			a.logger.Error("workload failed", "workload", e.ID, "epoch", e.Epoch, "reason", e.Reason)
			a.emit("failed", e.ID, "failed at epoch %d: %s", e.Epoch, e.Reason)
		case lease.QuorumReport:
			a.logger.Warn("workload without standby lacks relay quorum; it keeps running", "workload", e.ID, "since", e.LostAt)
			a.emit("quorum", e.ID, "no quorum since %s; no standby, keeps running", e.LostAt.Format(time.TimeOnly))
		}
	}
	if heldChanged {
		a.heldDirty = true // publishHeld on the next tick
		a.statusDirty = true
	}
}

func effectType(e lease.Effect) string {
	switch e.(type) {
	case lease.EnteredState:
		return "entered_state"
	case lease.StartWorkload:
		return "start"
	case lease.StopWorkload:
		return "stop"
	case lease.PublishRevocation:
		return "publish_revocation"
	case lease.PublishClaim:
		return "publish_claim"
	case lease.WithdrawClaim:
		return "withdraw_claim"
	case lease.ReadClaims:
		return "read_claims"
	case lease.AnnouncePromotion:
		return "announce_promotion"
	case lease.AttemptRespawn:
		return "attempt_respawn"
	case lease.Failed:
		return "failed"
	case lease.QuorumReport:
		return "quorum_report"
	}
	return "other"
}

func (a *Agent) goFeedback(ctx context.Context, f func(context.Context)) {
	a.fgWG.Add(1)
	go func() {
		defer a.fgWG.Done()
		f(ctx)
	}()
}

// outboxEvent signs the event an Outbox effect (lease.DurabilityOf) queues,
// created at at, and the idempotency key of its outbox row; a revocation's
// reason is final (fenceReason) and stateURI its workload's. It touches
// neither the machine nor the database, so it may run on any goroutine.
func (a *Agent) outboxEvent(e lease.Effect, at time.Time, stateURI string) (*nostr.Event, string, error) {
	var ev *nostr.Event
	var key string
	var err error
	switch e := e.(type) {
	case lease.PublishRevocation:
		ev, err = heartbeat.BuildRevocationFor(a.keys, e, at, stateURI)
		key = fmt.Sprintf("revocation:%s:%d", e.ID, e.Epoch)
	case lease.WithdrawClaim:
		ev, err = heartbeat.BuildWithdrawFor(a.keys, e, at)
		key = fmt.Sprintf("withdraw:%s:%d:%d", e.ID, e.Epoch, at.Unix())
	case lease.AnnouncePromotion:
		ev, err = heartbeat.BuildAnnouncementFor(a.keys, e, at)
		key = fmt.Sprintf("announcement:%s:%d", e.ID, e.Epoch)
	default:
		return nil, "", fmt.Errorf("%s is not an outbox effect", e)
	}
	if err != nil {
		return nil, "", fmt.Errorf("build %s: %w", e, err)
	}
	return ev, key, nil
}

// publishClaim publishes the active promotion claim of a PublishClaim
// effect, created at at, and reports how many relays accepted it (the
// claim step's feedback; withdrawn markers go through the outbox).
func (a *Agent) publishClaim(ctx context.Context, e lease.PublishClaim, at time.Time) {
	ev, err := heartbeat.BuildClaimFor(a.keys, e, at)
	if err != nil {
		a.logger.Error("build promotion claim", "workload", e.ID, "err", err)
		a.send(ctx, input{claimAck: &lease.ClaimAck{Workload: e.ID, Epoch: e.Epoch}})
		return
	}
	pctx, cancel := context.WithTimeout(ctx, a.claimIOTimeout())
	res := a.pool.Publish(pctx, ev)
	cancel()
	a.emit("claim", e.ID, "promotion claim for epoch %d accepted by %d of %d relays", e.Epoch, len(res.Accepted), a.cfg.Lease.N)
	a.send(ctx, input{claimAck: &lease.ClaimAck{Workload: e.ID, Epoch: e.Epoch, Accepted: len(res.Accepted)}})
}

// claimIOTimeout bounds one claim publish or claim read: PublishTimeout,
// but at most half of the lease's ClaimTimeout, so that each round's report
// reaches the machine before the round can time out and a later round
// begins (lease/doc.go: a report never outlives its round).
func (a *Agent) claimIOTimeout() time.Duration {
	return min(a.cfg.PublishTimeout, a.cfg.Lease.ClaimTimeout/2)
}

// routeQueueBytes bounds the events routeLoop holds for ingest (their
// content and tags); beyond it the relays' reads wait.
const routeQueueBytes = 32 << 20

// routeLoop takes what the relay layer delivers: copies of our own
// heartbeat events (ownbeats.go) go to the machine at once, counted from
// when they arrived; everything else is queued for the ingest goroutines,
// up to routeQueueBytes, so that the relays' reads (and with them our own
// heartbeats and the OKs of our publishes) never wait behind events being
// verified.
func (a *Agent) routeLoop(ctx context.Context) error {
	var queue []RelayEvent
	var head, bytes int
	for {
		in := a.received
		if bytes >= routeQueueBytes {
			in = nil // full: let the relays wait
		}
		var out chan<- RelayEvent
		var next RelayEvent
		if head < len(queue) {
			out, next = a.raw, queue[head]
		}
		select {
		case <-ctx.Done():
			return nil
		case re := <-in:
			if re.Event == nil {
				at := re.At
				if at.IsZero() {
					at = a.now()
				}
				// One pruned meanwhile is too old to count.
				if hb, ok := a.own.input(a.self, re.ID, re.Relay, at); ok {
					select {
					case a.beats <- input{hb: &hb}:
					case <-ctx.Done():
						return nil
					}
				}
				continue
			}
			queue = append(queue, re)
			bytes += eventBytes(re.Event)
			a.routed.Store(int64(len(queue) - head))
		case out <- next:
			queue[head] = RelayEvent{}
			head++
			bytes -= eventBytes(next.Event)
			a.routed.Store(int64(len(queue) - head))
			if head == len(queue) {
				queue, head = queue[:0], 0
			} else if head > 1024 && head*2 > len(queue) {
				queue = append(queue[:0], queue[head:]...)
				head = 0
			}
		}
	}
}

// eventBytes approximates the memory an event holds.
func eventBytes(ev *nostr.Event) int {
	n := 512 + len(ev.Content)
	for _, t := range ev.Tags {
		for _, v := range t {
			n += len(v) + 16
		}
	}
	return n
}

// ingestLoop verifies and decodes relay events and feeds machine inputs.
func (a *Agent) ingestLoop(ctx context.Context) error {
	for {
		var re RelayEvent
		select {
		case <-ctx.Done():
			return nil
		case re = <-a.raw:
		}
		now := a.now()
		// The event holds the cursor back from before it is verified (so a
		// later event finished meanwhile cannot carry the cursor past it),
		// but moves it only once it passed every check: signature, signer
		// rules, and created_at at most max_skew ahead (the ingestor's).
		// A rejected event - a forgery, a stranger's, one dated 2100 - is
		// dropped without moving it. Its token is finished by the machine
		// loop once the input's step is persisted.
		var tok store.Token
		tracked := !isHeartbeat(re.Event.Kind)
		if tracked {
			tok = a.cursor.Reserve(int64(re.Event.CreatedAt))
		}
		in, ok := a.decode(ctx, now, re)
		if !ok {
			if tracked {
				a.cursor.Done(tok)
			}
			continue
		}
		if tracked {
			a.cursor.Accept(tok)
		}
		in.cursorTok, in.hasTok = tok, tracked
		ch := a.inputs
		if in.hb != nil {
			ch = a.beats // heartbeats never wait behind bulk inputs
		}
		select {
		case ch <- in:
		case <-ctx.Done():
			return nil
		}
	}
}

func isHeartbeat(kind int) bool {
	return kind == heartbeat.KindHeartbeat || kind == heartbeat.KindHeartbeatEphemeral || kind == heartbeat.KindHeartbeatShard
}

func (a *Agent) decode(ctx context.Context, now time.Time, re RelayEvent) (input, bool) {
	if hb, ok := a.own.input(a.self, re.Event.ID, re.Relay, cmp.Or(re.At, now)); ok {
		// One of our own heartbeat events, parsed by a relay layer that
		// could not skip it: nothing to verify or decode (ownbeats.go).
		return input{hb: &hb}, true
	}
	if re.Event.PubKey == a.self && (re.Event.Kind == heartbeat.KindRevocation || re.Event.Kind == heartbeat.KindPromotion) {
		// Our own revocations, claims and announcements coming back: the
		// machine ignores its own (lease: ObserveRevocation, ObserveClaim),
		// so they are not worth a signature check. A forgery in our name
		// is dropped the same way.
		return input{}, false
	}
	if a.ownGrant(re.Event) {
		// A grant we published ourselves (ingestlog.go): not a rejection.
		return input{}, false
	}
	got, err := a.ingestor.Ingest(ctx, now, re.Event)
	if err != nil {
		reason := string(heartbeat.ReasonOf(err))
		a.met.eventsRejected.WithLabelValues(reason).Inc()
		a.logRejected(re, now, err)
		return input{}, false
	}
	switch {
	case got.Heartbeat != nil:
		// Expiry (NIP-40), age and skew were enforced by the ingestor.
		a.met.eventsAccepted.WithLabelValues("heartbeat").Inc()
		at := now
		if !re.At.IsZero() && re.At.Before(now) {
			at = re.At // counted from its arrival, not from the ingest backlog
		}
		hb := heartbeat.HeartbeatInput(got.Heartbeat, re.Relay, at)
		return input{hb: &hb}, true
	case got.Duplicate:
		return input{}, false
	case got.Revocation != nil:
		// Converted in feed: a Paygress revocation takes the machine's epoch.
		a.met.eventsAccepted.WithLabelValues("revocation").Inc()
		return input{rev: got.Revocation}, true
	case got.Promotion != nil:
		p := got.Promotion
		a.met.eventsAccepted.WithLabelValues("promotion").Inc()
		if p.Signer != a.self {
			epoch := fmt.Sprint(p.Epoch)
			if !p.HasEpoch {
				epoch = "(none: Paygress announcement)"
			}
			a.emit("received", p.WorkloadID, "promotion claim (%s) for epoch %s from %s", p.Status, epoch, short(p.Signer))
		}
		return input{claims: []relayClaim{{p: p, relay: re.Relay}}}, true
	case got.LeaseGrant != nil:
		a.met.eventsAccepted.WithLabelValues("lease_grant").Inc()
		spec := a.specFromGrant(got.LeaseGrant)
		return input{grant: &spec}, true
	}
	return input{}, false
}

// specFromGrant is the lease spec of a grant from the relays. An on-failure
// restart policy without a count gets Config.RestartMaxAttempts.
func (a *Agent) specFromGrant(g *heartbeat.LeaseGrant) lease.Spec {
	s := heartbeat.SpecOf(g)
	if s.RestartPolicy.Policy == lease.RestartOnFailure && s.RestartPolicy.MaxAttempts == 0 {
		s.RestartPolicy.MaxAttempts = a.cfg.RestartMaxAttempts
	}
	return s
}

// heartbeatLoop publishes our heartbeats every interval: one beat of
// heartbeat.BuildBeat, the held list dealt over shard events that fit every
// relay (beatBudget), the stored events and the ephemeral copy of the first.
func (a *Agent) heartbeatLoop(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Lease.HeartbeatInterval)
	defer t.Stop()
	ttl := a.cfg.HeartbeatTTL
	if ttl == 0 {
		ttl = heartbeat.MinHeartbeatTTL(a.cfg.Lease.Stale, a.cfg.Lease.MaxSkew)
	}
	// The first beat waits (up to one interval) for a relay connection.
	for i := 0; i < 20 && ctx.Err() == nil; i++ {
		if up := a.connected(); up > 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.cfg.Lease.HeartbeatInterval / 20):
		}
	}
	for {
		now := a.now()
		held := a.heldList()
		maxEvent, maxContent := a.beatBudget()
		beat, err := heartbeat.BuildBeat(a.keys, heartbeat.HeartbeatParams{
			At: now, Workloads: held, TTL: ttl, MaxEventBytes: maxEvent, MaxContentBytes: maxContent,
		})
		if err != nil {
			a.logger.Error("build heartbeat", "err", err)
		} else {
			a.own.add(beat)
			a.own.prune(now.Add(-a.cfg.Lease.Stale - a.cfg.Lease.MaxSkew))
			a.met.beatBytes.Set(float64(beat.MaxSize()))
			a.met.beatEvents.Set(float64(len(beat.Stored) + 1))
			all := a.publishBeat(ctx, beat)
			if a.onEvent != nil {
				listing := fmt.Sprintf("%d workloads in %d events", len(held), len(beat.Stored)+1)
				if len(held) <= 20 {
					ids := make([]string, len(held))
					for i, h := range held {
						ids[i] = fmt.Sprintf("%s@%d", h.ID, h.Epoch)
					}
					listing = "[" + strings.Join(ids, " ") + "]"
				}
				a.emit("heartbeat", "", "heartbeat published, accepted by %d of %d relays, listing %s", all, a.cfg.Lease.N, listing)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// beatPublishes bounds the events of one beat published at once.
const beatPublishes = 8

// publishBeat publishes every event of a beat, at most beatPublishes at
// once, within one heartbeat interval (or PublishTimeout), and returns how
// many relays accepted all of them.
func (a *Agent) publishBeat(ctx context.Context, beat heartbeat.Beat) int {
	timeout := min(a.cfg.PublishTimeout, a.cfg.Lease.HeartbeatInterval)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	evs := beat.Events()
	var mu sync.Mutex
	accepted := map[string]int{}
	sem := make(chan struct{}, beatPublishes)
	var wg sync.WaitGroup
	for _, ev := range evs {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res := a.pool.Publish(pctx, ev)
			mu.Lock()
			for _, r := range res.Accepted {
				accepted[r]++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	all := 0
	for _, n := range accepted {
		if n == len(evs) {
			all++
		}
	}
	return all
}

// eventFrameOverhead is what an EVENT frame adds to its event's JSON:
// ["EVENT", and the closing bracket.
const eventFrameOverhead = len(`["EVENT",]`)

// beatTags is the most tags an event of a beat carries.
const beatTags = 5

// beatBudget is the size bound of every event of a beat: 60 KiB
// (heartbeat.DefaultMaxEventBytes, under strfry's 65,536-byte events, which
// it does not advertise), and within every relay's NIP-11 max_message_length
// (less the frame) and max_content_length (0: none). A relay whose
// max_event_tags is below a beat's tags cannot take our heartbeats at all:
// that is logged.
func (a *Agent) beatBudget() (event, content int) {
	event = heartbeat.DefaultMaxEventBytes
	for _, r := range a.pool.Status() {
		l := r.Limits
		if l == nil {
			continue
		}
		if l.MaxMessageLength > 0 {
			event = min(event, l.MaxMessageLength-eventFrameOverhead)
		}
		if l.MaxContentLength > 0 && (content == 0 || l.MaxContentLength < content) {
			content = l.MaxContentLength
		}
		if l.MaxEventTags > 0 && l.MaxEventTags < beatTags && a.tagsWarned.CompareAndSwap(false, true) {
			a.logger.Warn("relay takes fewer tags per event than a heartbeat has: it will refuse our heartbeats",
				"relay", r.URL, "max_event_tags", l.MaxEventTags, "heartbeat_tags", beatTags)
		}
	}
	return event, content
}

// onOutboxAttempt is called after every publish attempt of the outbox.
func (a *Agent) onOutboxAttempt(ev *nostr.Event, res PublishResult) {
	if ev.Kind != heartbeat.KindRevocation || len(res.Accepted) >= a.cfg.Lease.M {
		return
	}
	// Once per event: the outbox may retry many times.
	a.attemptMu.Lock()
	seen := a.attempted[ev.ID]
	a.attempted[ev.ID] = true
	a.attemptMu.Unlock()
	if seen {
		return
	}
	a.emit("revocation", tagValue(ev, "workload"), "revocation published: accepted by %d relays (%s), below quorum %d: the outbox retries",
		len(res.Accepted), strings.Join(res.Accepted, " "), a.cfg.Lease.M)
}

func tagValue(ev *nostr.Event, name string) string {
	if t := ev.Tags.GetFirst([]string{name, ""}); t != nil && len(*t) > 1 {
		return (*t)[1]
	}
	return ""
}

// onOutboxAck is called when the courier delivered an event to quorum.
func (a *Agent) onOutboxAck(ev *nostr.Event, res PublishResult) {
	if ev.Kind == heartbeat.KindRevocation {
		a.met.revocations.WithLabelValues("sent").Inc()
		a.emit("revocation", tagValue(ev, "workload"), "revocation delivered: accepted by %d relays (%s)", len(res.Accepted), strings.Join(res.Accepted, " "))
	}
}

// saveMeta persists the machine's relay tables, the workloads an input may
// have changed without an effect since the last save (dirty: a holder's
// heartbeats refresh a standby's claim times; claims add rivals, which a
// later Tick may adopt), and the cursor (clamped to now). Workloads whose
// effects were committed with their step are written then, not here; no
// other row is encoded, however many workloads are tracked. A row counts
// as saved only once the transaction committed. Held (unpersisted) steps
// are committed first; while they cannot be, nothing is saved
// (ErrUnpersisted): the snapshot would record their state without their
// outbox rows. Rows of workloads in the backlog wait for their batch.
func (a *Agent) saveMeta(ctx context.Context) error { return a.saveMetaRun(ctx, true) }

// saveMetaRun is saveMeta; run=false (shutdown) commits the backlog and
// held steps without performing their deferred effects.
func (a *Agent) saveMetaRun(ctx context.Context, run bool) error {
	if !run {
		for !a.bl.empty() {
			if err := a.drainBacklog(ctx, false); err != nil {
				return fmt.Errorf("save machine: %w", err)
			}
		}
	}
	now := a.now()
	if !a.pend.empty() {
		a.pend.retryAt = time.Time{}
		if err := a.commitStep(ctx, now, nil, nil, nil, run); err != nil {
			return fmt.Errorf("save machine: %w: %w", ErrUnpersisted, err)
		}
	}
	var changed []workloadRow
	var seen []string
	for _, set := range []dirtySet{a.dirty, a.rivalWatch} {
		for id := range set {
			if a.bl.has(id) {
				continue
			}
			seen = append(seen, id)
			w, ok := a.m.Workload(id)
			if !ok {
				continue
			}
			r, err := rowOf(&w)
			if err != nil {
				return fmt.Errorf("save machine: %w", err)
			}
			if a.saved[id] != r.hash {
				changed = append(changed, r)
			}
			if len(w.Rivals) == 0 {
				a.rivalWatch.remove(id)
			}
		}
	}
	snap := a.m.Snapshot()
	snap.Workloads = nil
	cursor := min(a.cursor.Cursor(), now.Unix())
	err := sqlitedb.InTxWait(ctx, a.db, a.cfg.CommitWait, func(tx *sql.Tx) error {
		if err := saveWorkloadRows(ctx, a.st, tx, changed); err != nil {
			return err
		}
		if err := saveMachineMeta(ctx, a.st, tx, snap); err != nil {
			return err
		}
		if _, err := a.st.SaveCursor(ctx, tx, cursorKey, max(cursor, 0)); err != nil {
			return fmt.Errorf("save cursor: %w", err)
		}
		return nil
	})
	a.noteWrite(err)
	if err != nil {
		return fmt.Errorf("save machine: %w", err)
	}
	for _, r := range changed {
		a.saved[r.id] = r.hash
	}
	for _, id := range seen {
		a.dirty.remove(id)
	}
	a.met.savedRows.Add(float64(len(changed)))
	return nil
}

// cmdBatch bounds the operator commands applied in one step (one commit);
// more wait for the loop's next turn, after inputs and ticks had theirs.
const cmdBatch = 256

// applyCommands applies up to cmdBatch operator commands queued in the
// database in one step; a release ends the batch (it removes the workload
// from the machine once committed). cmdsMore says whether more wait.
func (a *Agent) applyCommands(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, a.cfg.CommitWait)
	cmds, err := listPendingCommands(lctx, a.db, cmdBatch+1)
	cancel()
	a.cmdsMore = false
	if err != nil {
		a.logger.Error("read operator commands", "err", err)
		return
	}
	if len(cmds) > cmdBatch {
		a.cmdsMore = true
		cmds = cmds[:cmdBatch]
	}
	if len(cmds) == 0 {
		return
	}
	now := a.now()
	var effs []lease.Effect
	type applied struct {
		seq    int64
		result string
	}
	var marks []applied
	var release string
	for i, c := range cmds {
		result := "ok"
		switch c.Action {
		case "grant":
			if c.Spec == nil {
				result = "error: no spec"
				break
			}
			a.dirty.add(c.Spec.ID)
			e, err := a.m.Track(now, *c.Spec)
			if err != nil {
				result = "error: " + err.Error()
			}
			effs = append(effs, e...)
			a.subs.dirty = true
			a.emit("grant", c.Workload, "local operator grant applied: %s", result)
		case "release":
			w, ok := a.m.Workload(c.Workload)
			if !ok {
				result = "error: workload not tracked"
				break
			}
			if w.State.Holding() {
				effs = append(effs, lease.StopWorkload{ID: c.Workload, Epoch: w.Epoch, Reason: "released by operator"})
			}
			release = c.Workload
		}
		marks = append(marks, applied{seq: c.Seq, result: result})
		if release != "" {
			a.cmdsMore = a.cmdsMore || i < len(cmds)-1
			break
		}
	}
	err = a.commit(ctx, now, effs, func(tx *sql.Tx) error {
		if release != "" {
			if err := a.st.DeleteWorkload(ctx, tx, release); err != nil {
				return fmt.Errorf("delete workload %s: %w", release, err)
			}
			if err := a.claimTimes.forget(ctx, a.st, tx, release); err != nil {
				return err
			}
		}
		for _, m := range marks {
			if err := markCommand(ctx, tx, m.seq, now, m.result); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		a.logger.Error("apply operator commands", "first_seq", cmds[0].Seq, "commands", len(marks), "err", err)
		a.cmdsMore = false // retried with the next second's turn
		return
	}
	if release != "" {
		a.m.Remove(release)
		delete(a.saved, release)
		a.dirty.remove(release)
		a.rivalWatch.remove(release)
		a.heldDirty, a.statusDirty, a.subs.dirty = true, true, true
		a.statusIDs.add(release)
		a.refreshPolicy([]string{release})
	}
}

func short(hexKey string) string {
	if len(hexKey) > 8 {
		return hexKey[:8]
	}
	if hexKey == "" {
		return "(none)"
	}
	return hexKey
}

// sleepCtx waits for d (no wait when d <= 0) unless ctx ends first; it
// reports whether the wait completed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
