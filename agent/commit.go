package agent

// Persisting machine steps: each step's changed workloads, outbox rows and
// cursor tokens commit in one transaction (big steps in batches, see
// backlog.go), held and retried when the commit fails.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"provideragent/agent/store"
	"provideragent/courier"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

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
//     announcements) and the created_at of their claims are committed in
//     one transaction that waits at most CommitWait for the database (per
//     batch of commitBatch workloads for a bigger step: backlog.go).
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
	if len(effs) == 0 && extra == nil && a.commits.pend.empty() {
		a.finish(toks)
		return nil
	}
	a.performEarly(ctx, now, effs)
	pieces, g := a.commits.bl.split(now, effs, toks)
	a.refreshPolicy(pieceIDs(pieces))
	if len(pieces) > commitBatch {
		// The rest waits in the backlog, committed one batch per turn of
		// the machine loop (backlog.go).
		a.commits.bl.push(pieces[commitBatch:])
		a.met.backlog.Set(float64(a.commits.bl.len()))
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
	pieces := a.commits.bl.next(commitBatch)
	a.met.backlog.Set(float64(a.commits.bl.len()))
	return a.commitPieces(ctx, a.now(), pieces, nil, nil, run)
}

// commitPieces persists pieces of steps (and extra), then performs their
// deferred effects: the second half of commitStep. toks are tokens to
// finish with the commit besides those of the steps the pieces complete.
func (a *Agent) commitPieces(ctx context.Context, now time.Time, pieces []*piece, toks []store.Token, extra func(tx *sql.Tx) error, run bool) error {
	if len(pieces) == 0 && extra == nil && a.commits.pend.empty() {
		a.finish(toks)
		return nil
	}
	start := time.Now()
	timed, effs, ids := flatten(pieces)
	rows := a.outboxRows(ctx, timed)
	toks = append(toks, done(pieces)...)

	held := !a.commits.pend.empty()
	if held {
		a.commits.pend.add(effs, rows, toks)
		if extra == nil && now.Before(a.commits.pend.retryAt) {
			return fmt.Errorf("commit step: %w", ErrUnpersisted)
		}
	}
	var later []lease.Effect
	writeIDs, writeRows := ids, rows
	if held {
		later = a.commits.pend.effects(a.m)
		writeIDs, writeRows = a.commits.pend.ids, a.commits.pend.rows
	} else {
		later = lease.AfterCommit(effs)
	}
	err := a.persist(ctx, now, writeIDs, writeRows, later, extra, run)
	a.noteWrite(err)
	if err != nil {
		// The next attempt without new effects comes commitRetryEvery
		// after this one ended: counted from the step's start, an attempt
		// that waited for the database made every later step retry (and
		// wait) at once, and the loop never reached its tick.
		a.commits.pend.retryAt = a.now().Add(commitRetryEvery)
		if !held {
			a.commits.pend.add(effs, rows, toks)
		}
		a.met.stepErrors.Inc()
		switch {
		case a.commits.pend.empty():
			// Nothing held (an operator command alone): its caller reports it.
		case a.commits.pend.since.IsZero():
			a.commits.pend.since = now
			a.logger.Error("database write failed: fencing continues; starts, claims and revocations wait until a step persists",
				"err", err, "retry_every", commitRetryEvery)
			a.emit("persist", "", "step not persisted (%v): stops performed, the rest held back", err)
		default:
			a.logger.Debug("database write still failing", "err", err, "held_steps", a.commits.pend.steps)
		}
		return fmt.Errorf("commit step: %w", err)
	}
	if held {
		a.logger.Warn("database writable again: held machine steps persisted", "steps", a.commits.pend.steps,
			"after", now.Sub(a.commits.pend.since).Round(time.Millisecond))
		a.emit("persist", "", "%d held steps persisted after %v", a.commits.pend.steps, now.Sub(a.commits.pend.since).Round(time.Millisecond))
		toks = a.commits.pend.toks
		a.commits.pend = unpersisted{}
	}
	a.finish(toks)
	a.met.stepSeconds.Observe(time.Since(start).Seconds())
	return nil
}

// commitRetryEvery is how often held (unpersisted) steps are retried when
// no new step comes.
const commitRetryEvery = time.Second

// commitProbeWait bounds how long a retry of held steps waits for the
// database: the first failure showed it busy (another process holding the
// write lock, a full disk), so a retry only looks whether that ended, and
// never keeps the machine loop from its inputs and ticks for longer.
const commitProbeWait = 20 * time.Millisecond

// dbWait is how long the machine goroutine's next database access may wait
// for the database: CommitWait, or commitProbeWait while steps are held.
func (a *Agent) dbWait() time.Duration {
	if !a.commits.pend.empty() {
		return min(a.cfg.CommitWait, commitProbeWait)
	}
	return a.cfg.CommitWait
}

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
	wait := a.dbWait()
	wctx, cancel := context.WithTimeout(ctx, wait)
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
			at, err := a.commits.claimTimes.next(wctx, a.st, id, now)
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
	kv := a.commits.claimTimes.kv(stamped)
	if !a.commits.metaSaved {
		meta, err := json.Marshal(a.m.MetaSnapshot())
		if err != nil {
			return fmt.Errorf("save machine: %w", err)
		}
		if kv == nil {
			kv = map[string][]byte{}
		}
		kv[kvMachine] = meta
	}
	err := sqlitedb.InTxWait(ctx, a.db, wait, func(tx *sql.Tx) error {
		step := store.Step{Workloads: storeRows(wrows), KV: kv}
		if err := a.st.SaveStep(ctx, tx, step); err != nil {
			return fmt.Errorf("save step: %w", err)
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
	a.commits.metaSaved = true
	for _, r := range wrows {
		a.commits.saved[r.ID] = r.hash
		a.commits.dirty.remove(r.ID)
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
		// At shutdown: the step in flight when the context ended may have
		// failed on it and be held for a retry later; retry it now, with
		// this context, rather than give up on the backlog behind it.
		for !a.commits.bl.empty() {
			a.commits.pend.retryAt = time.Time{}
			if err := a.drainBacklog(ctx, false); err != nil {
				return fmt.Errorf("save machine: %w", err)
			}
		}
	}
	now := a.now()
	if !a.commits.pend.empty() {
		a.commits.pend.retryAt = time.Time{}
		if err := a.commitStep(ctx, now, nil, nil, nil, run); err != nil {
			return fmt.Errorf("save machine: %w: %w", ErrUnpersisted, err)
		}
	}
	var changed []workloadRow
	var seen []string
	encoded := map[string]bool{} // a workload may be in both sets
	for _, set := range []dirtySet{a.commits.dirty, a.commits.rivalWatch} {
		for id := range set {
			if a.commits.bl.has(id) || encoded[id] {
				continue
			}
			encoded[id] = true
			seen = append(seen, id)
			w, ok := a.m.Workload(id)
			if !ok {
				continue
			}
			r, err := rowOf(&w)
			if err != nil {
				return fmt.Errorf("save machine: %w", err)
			}
			if a.commits.saved[id] != r.hash {
				changed = append(changed, r)
			}
			if len(w.Rivals) == 0 {
				a.commits.rivalWatch.remove(id)
			}
		}
	}
	meta, err := json.Marshal(a.m.MetaSnapshot())
	if err != nil {
		return fmt.Errorf("save machine: %w", err)
	}
	step := store.Step{
		Workloads: storeRows(changed),
		KV:        map[string][]byte{kvMachine: meta},
		Cursors:   map[string]int64{cursorKey: max(min(a.cursor.Cursor(), now.Unix()), 0)},
	}
	err = sqlitedb.InTxWait(ctx, a.db, a.dbWait(), func(tx *sql.Tx) error { return a.st.SaveStep(ctx, tx, step) })
	a.noteWrite(err)
	if err != nil {
		return fmt.Errorf("save machine: %w", err)
	}
	a.commits.metaSaved = true
	for _, r := range changed {
		a.commits.saved[r.ID] = r.hash
	}
	for _, id := range seen {
		a.commits.dirty.remove(id)
	}
	a.met.savedRows.Add(float64(len(changed)))
	return nil
}
