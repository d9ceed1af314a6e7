package driver

import (
	"context"
	"fmt"
	"time"

	"provideragent/lease"
)

// commit is what one commit writes and performs besides the pieces of
// steps it takes: the time, tokens, release and own rows of the step that
// asks for it (none for a backlog batch or a retry of held steps).
type commit[X any] struct {
	now time.Time
	// toks are tokens to finish with the commit, besides those of the
	// steps its pieces complete.
	toks []Token
	// release is the workload the commit forgets (Step.Release), "" none.
	release string
	// extra is the caller's own rows (Step.Extra), when hasExtra.
	extra    X
	hasExtra bool
	// run performs the deferred effects once committed; false at shutdown,
	// when a restart re-derives them (Restore, Outstanding, RelaySynced).
	run bool
	// wait bounds the commit's waits for the database when set (Close's
	// CloseWait); zero: dbWait.
	wait time.Duration
}

// waitOf is how long c's database accesses may wait.
func (d *Driver[P, X]) waitOf(c commit[X]) time.Duration {
	if c.wait > 0 {
		return c.wait
	}
	return d.dbWait()
}

// own reports whether the commit carries the step's own rows or a
// release: it is then attempted even while held steps wait for a retry.
func (c commit[X]) own() bool { return c.hasExtra || c.release != "" }

// commitStep persists one step's effects effs and performs them (the
// package doc): the stops and reports first, then the commit of the
// workloads the effects concern (in pieces for a big step), then, once
// committed, the rest. c.toks are the step's tokens.
func (d *Driver[P, X]) commitStep(ctx context.Context, effs []lease.Effect, c commit[X]) error {
	if len(effs) == 0 && !c.own() && d.pend.empty() && d.metaSaved {
		d.finish(c.toks)
		return nil
	}
	d.performEarly(effs)
	pieces, g := d.bl.split(c.now, effs, c.toks)
	if n := d.cfg.CommitBatch; len(pieces) > n {
		// The rest waits in the backlog, committed one batch per
		// DrainBacklog.
		d.bl.push(pieces[n:])
		d.deps.Events.Backlog(d.bl.len())
		pieces = pieces[:n]
	}
	c.toks = nil
	if len(pieces) == 0 {
		c.toks = g.toks // no piece: the step's tokens go with this commit
	}
	return d.commitPieces(ctx, pieces, c)
}

// DrainBacklog commits the next batch of the backlog.
func (d *Driver[P, X]) DrainBacklog(ctx context.Context, now time.Time) error {
	return d.drain(ctx, commit[X]{now: now, run: true})
}

// drain commits the next batch of the backlog as c (its time, whether it
// performs, how long it waits).
func (d *Driver[P, X]) drain(ctx context.Context, c commit[X]) error {
	pieces := d.bl.next(d.cfg.CommitBatch)
	d.deps.Events.Backlog(d.bl.len())
	return d.commitPieces(ctx, pieces, c)
}

// performEarly performs the effects that do not wait for the commit
// (lease.BeforeCommit: stops and reports).
func (d *Driver[P, X]) performEarly(effs []lease.Effect) {
	for _, e := range effs {
		if lease.BeforeCommit(e) {
			d.deps.Performer.Perform(e, time.Time{})
		}
	}
}

// commitPieces persists pieces of steps, then performs their deferred
// effects: the second half of commitStep.
func (d *Driver[P, X]) commitPieces(ctx context.Context, pieces []*piece, c commit[X]) error {
	now := c.now
	if len(pieces) == 0 && !c.own() && d.pend.empty() && d.metaSaved {
		d.finish(c.toks)
		return nil
	}
	timed, effs, ids := flatten(pieces)
	rows := d.outboxRows(ctx, timed, d.waitOf(c))
	toks := append(c.toks, done(pieces)...)

	held := !d.pend.empty()
	if held {
		d.pend.add(effs, rows, toks)
		if !c.own() && now.Before(d.pend.retryAt) {
			return fmt.Errorf("commit step: %w", ErrUnpersisted)
		}
	}
	var later []lease.Effect
	writeIDs, writeRows := ids, rows
	if held {
		later = d.m.AfterHeld(d.pend.effs)
		writeIDs, writeRows = d.pend.ids, d.pend.rows
	} else {
		later = lease.AfterCommit(effs)
	}
	err := d.persist(ctx, c, writes[P]{ids: writeIDs, rows: writeRows, later: later})
	d.deps.Events.Attempted(err)
	if err != nil {
		if !held {
			d.pend.add(effs, rows, toks)
		}
		if !d.pend.empty() {
			first := d.pend.since.IsZero()
			if first {
				d.pend.since = now
			}
			d.deps.Events.Held(err, d.pend.steps, first)
		}
		d.pend.retryAt = now.Add(d.cfg.RetryEvery)
		return fmt.Errorf("commit step: %w", err)
	}
	if held {
		d.deps.Events.Persisted(d.pend.steps, d.pend.since, now)
		toks = d.pend.toks
		d.pend = unpersisted[P]{}
	}
	d.finish(toks)
	return nil
}

// writes are what a commit writes for the pieces it takes (or the held
// steps it retries): the workloads whose rows to write (their current
// snapshots), the outbox rows, and the deferred effects to perform once
// committed (the created_at of their claims is committed with them).
type writes[P any] struct {
	ids   []string
	rows  []outRow[P]
	later []lease.Effect
}

// persist commits w and c's release and own rows in one transaction; once
// it committed it performs w.later when c.run is set.
func (d *Driver[P, X]) persist(ctx context.Context, c commit[X], w writes[P]) error {
	now, release, run, later := c.now, c.release, c.run, w.later
	b := &Batch[P, X]{Extra: c.extra}
	for _, id := range w.ids {
		if id == release {
			continue
		}
		if snap, ok := d.m.Workload(id); ok {
			b.Workloads = append(b.Workloads, snap)
		}
	}
	wait := d.waitOf(c)
	// created_at of claims and withdrawn markers, strictly increasing per
	// workload (claimtime.go), persisted with the step.
	var stamps []time.Time
	var stamped []string
	for _, r := range w.rows {
		b.Outbox = append(b.Outbox, r.OutboxRow)
		if r.claimTime != "" {
			stamped = append(stamped, r.claimTime)
		}
	}
	if run {
		for i, e := range later {
			pc, ok := e.(lease.PublishClaim)
			if !ok {
				continue
			}
			at, err := d.claims.next(ctx, d.deps.Store.LastClaimTime, pc.ID, now, wait)
			if err != nil {
				return err
			}
			if stamps == nil {
				stamps = make([]time.Time, len(later))
			}
			stamps[i] = at
			stamped = append(stamped, pc.ID)
		}
	}
	b.ClaimTimes = d.claims.values(stamped)
	if release != "" {
		b.Deleted = []string{release}
		b.ClaimTimes = d.claims.forget(b.ClaimTimes, release)
	}
	if !d.metaSaved {
		meta := d.m.MetaSnapshot()
		b.Meta = &meta
	}
	if err := d.deps.Store.Commit(ctx, b, wait); err != nil {
		return err
	}
	d.metaSaved = true
	for _, snap := range b.Workloads {
		d.dirty.remove(snap.Spec.ID)
	}
	if release != "" {
		d.m.Remove(release)
		d.dirty.remove(release)
		d.rivalWatch.remove(release)
	}
	if run {
		for i, e := range later {
			var at time.Time
			if i < len(stamps) {
				at = stamps[i]
			}
			d.deps.Performer.Perform(e, at)
		}
	}
	return nil
}

// outboxRows builds the step's outbox effects (lease.DurabilityOf: the
// revocations, withdrawn markers and announcements) for the outbox, before
// the transaction. A withdrawn marker takes its created_at from the claim
// times (after its claim's) and its row carries the workload whose claim
// time the commit must save. An event that cannot be built is reported and
// left out: for a revocation, the standby's takeover covers one that never
// comes.
func (d *Driver[P, X]) outboxRows(ctx context.Context, effs []timedEffect, wait time.Duration) []outRow[P] {
	var jobs []OutboxJob
	var claimed []string // per job: the workload whose claim time it used
	for _, te := range effs {
		e, at := te.e, te.at
		if lease.DurabilityOf(e) != lease.Outbox {
			continue
		}
		var claimOf string
		if wc, ok := e.(lease.WithdrawClaim); ok {
			t, err := d.claims.next(ctx, d.deps.Store.LastClaimTime, wc.ID, at, wait)
			if err != nil {
				d.deps.Events.Dropped(e, err)
				continue
			}
			at, claimOf = t, wc.ID
		}
		w, _ := d.m.Workload(e.Workload())
		jobs = append(jobs, OutboxJob{Effect: e, At: at, Workload: w})
		claimed = append(claimed, claimOf)
	}
	if len(jobs) == 0 {
		return nil
	}
	res := d.deps.Outbox.Build(jobs)
	rows := make([]outRow[P], 0, len(jobs))
	for i, r := range res {
		if r.Unneeded {
			continue
		}
		if r.Err != nil {
			d.deps.Events.Dropped(jobs[i].Effect, r.Err)
			continue
		}
		rows = append(rows, outRow[P]{OutboxRow: r.Row, claimTime: claimed[i]})
	}
	return rows
}

// outRow is an outbox row with the workload whose claim time its event
// used (a withdrawn marker's), which the commit saves with it.
type outRow[P any] struct {
	OutboxRow[P]
	claimTime string
}

// Save persists the machine's metadata (relay tables, clock, sync flags),
// the workloads an input may have changed without an effect since the
// last save (a holder's heartbeats refresh a standby's claim times; claims
// add rivals, which a later Tick may adopt), and the caller's cursor, in one
// transaction. Workloads whose effects were committed with their step are
// written then, not here; no other row is copied, however many workloads
// are tracked (the Store may skip rows equal to what it holds). Held steps are committed first; while they cannot be,
// nothing is saved (ErrUnpersisted): the metadata would record their state
// without their outbox rows. Rows of workloads in the backlog wait for
// their batch.
func (d *Driver[P, X]) Save(ctx context.Context, now time.Time, cursor int64) error {
	return d.save(ctx, cursor, commit[X]{now: now, run: true})
}

// Close persists everything at shutdown: the backlog and held steps (their
// deferred effects not performed: a restart re-derives them), then a Save.
func (d *Driver[P, X]) Close(ctx context.Context, now time.Time, cursor int64) error {
	// Nothing else waits on the machine goroutine now: its waits for the
	// database are CloseWait's.
	return d.save(ctx, cursor, commit[X]{now: now, wait: max(d.cfg.CommitWait, d.cfg.CloseWait)})
}

// save commits the held steps (with the backlog first when c does not
// run: at shutdown) as c, then the changed rows and the metadata.
func (d *Driver[P, X]) save(ctx context.Context, cursor int64, c commit[X]) error {
	now, run := c.now, c.run
	if !run {
		for !d.bl.empty() {
			d.pend.retryAt = time.Time{}
			if err := d.drain(ctx, c); err != nil {
				return fmt.Errorf("save machine: %w", err)
			}
		}
	}
	if !d.pend.empty() {
		d.pend.retryAt = time.Time{}
		if err := d.commitStep(ctx, nil, c); err != nil {
			return fmt.Errorf("save machine: %w: %w", ErrUnpersisted, err)
		}
	}
	var changed []lease.WorkloadSnapshot
	var seen []string
	listed := map[string]bool{} // a workload may be in both sets
	for _, set := range []idSet{d.dirty, d.rivalWatch} {
		for id := range set {
			if d.bl.has(id) || listed[id] {
				continue
			}
			listed[id] = true
			seen = append(seen, id)
			w, ok := d.m.Workload(id)
			if !ok {
				continue
			}
			changed = append(changed, w)
			if len(w.Rivals) == 0 {
				d.rivalWatch.remove(id)
			}
		}
	}
	meta := d.m.MetaSnapshot()
	cur := max(min(cursor, now.Unix()), 0)
	b := &Batch[P, X]{Workloads: changed, Meta: &meta, Cursor: &cur}
	if err := d.deps.Store.Commit(ctx, b, d.waitOf(c)); err != nil {
		return fmt.Errorf("save machine: %w", err)
	}
	d.metaSaved = true
	for _, id := range seen {
		d.dirty.remove(id)
	}
	d.deps.Events.Saved(len(changed))
	return nil
}

// unpersisted is what the machine did in steps whose commit failed (disk
// full, I/O error, or the write lock held elsewhere past the wait), kept
// until a commit succeeds. Their stops, state changes and reports were
// performed at once (lease.BeforeCommit); what needs the persisted state
// waits here:
//   - ids: workloads whose rows the next commit writes (their current
//     snapshots, which include these steps);
//   - rows: the outbox events (revocations, withdrawn markers,
//     announcements) to queue in that commit;
//   - effs: the steps' effects in order. They are not replayed as they were:
//     after the commit lease.Machine.AfterHeld derives what to perform from
//     the machine's state then (the outbox effects as queued, starts only of
//     workloads still held running, outstanding claim-step and respawn
//     requests), so a start a later step stopped or superseded never runs;
//   - toks: tokens of the steps' inputs, finished only after that commit.
type unpersisted[P any] struct {
	ids     []string
	seen    map[string]bool
	rows    []outRow[P]
	keys    map[string]bool
	effs    []lease.Effect
	toks    []Token
	steps   int       // steps held
	since   time.Time // first failed commit of this episode
	retryAt time.Time // next commit attempt without new effects
}

func (u *unpersisted[P]) empty() bool { return u.steps == 0 }

// add folds one step (its effects in order, outbox rows and tokens) into
// the held steps.
func (u *unpersisted[P]) add(effs []lease.Effect, rows []outRow[P], toks []Token) {
	if len(effs) == 0 && len(rows) == 0 && len(toks) == 0 {
		return
	}
	if u.seen == nil {
		u.seen, u.keys = map[string]bool{}, map[string]bool{}
	}
	u.steps++
	for _, e := range effs {
		if id := e.Workload(); !u.seen[id] {
			u.seen[id] = true
			u.ids = append(u.ids, id)
		}
	}
	u.effs = append(u.effs, effs...)
	for _, r := range rows {
		if !u.keys[r.Key] {
			u.keys[r.Key] = true
			u.rows = append(u.rows, r)
		}
	}
	u.toks = append(u.toks, toks...)
}
