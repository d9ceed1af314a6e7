package agent

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent/store"
	"provideragent/courier"
	"provideragent/heartbeat"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

// saveSeed seeds the hashes that detect unchanged workload rows.
var saveSeed = maphash.MakeSeed()

// maxBatch bounds how many inputs one machine step folds into one commit.
const maxBatch = 256

// machineLoop owns the lease machine: it feeds inputs, ticks, persists each
// step with its outbox rows in one transaction, then performs the effects.
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
		inputs := a.inputs
		if a.holdInputs.Load() {
			inputs = nil
		}
		select {
		case <-ctx.Done():
			return a.saveMetaRun(context.WithoutCancel(ctx), false)
		case in := <-inputs:
			now := a.now()
			var effs []lease.Effect
			var cursors []store.Token
			effs, cursors = a.feed(now, in, effs, cursors)
		drain:
			for i := 1; i < maxBatch; i++ {
				select {
				case in = <-a.inputs:
					effs, cursors = a.feed(now, in, effs, cursors)
				default:
					break drain
				}
			}
			// Errors are logged and counted by commitStep; the step is held
			// and retried, its cursor tokens finished only once persisted.
			_ = a.commitStep(ctx, now, effs, cursors, nil, true)
			a.lastStep.Store(now.UnixNano())
			if a.statusDirty && now.Sub(a.lastStat) >= 100*time.Millisecond {
				a.refreshStatus(now)
			}
		case <-tick.C:
			now := a.now()
			effs := a.syncRelays(now)
			effs = append(effs, a.m.Tick(now)...)
			_ = a.commit(ctx, now, effs, nil)
			a.lastStep.Store(now.UnixNano())
			a.watchQuorum(now)
			if now.Sub(a.lastStat) >= time.Second || (a.statusDirty && now.Sub(a.lastStat) >= 100*time.Millisecond) {
				a.refreshStatus(now)
			}
		case <-cmds.C:
			a.applyCommands(ctx)
		case <-save.C:
			if err := a.saveMeta(ctx); err != nil {
				a.logger.Error("save machine", "err", err)
			}
		}
	}
}

// feed applies one input to the machine and appends its effects.
func (a *Agent) feed(now time.Time, in input, effs []lease.Effect, cursors []store.Token) ([]lease.Effect, []store.Token) {
	if in.hasTok {
		cursors = append(cursors, in.cursorTok)
	}
	switch {
	case in.hb != nil:
		effs = append(effs, a.m.ObserveHeartbeat(now, *in.hb)...)
	case in.rev != nil:
		w, _ := a.m.Workload(in.rev.WorkloadID)
		r := heartbeat.RevocationInput(in.rev, w)
		a.met.revocations.WithLabelValues("received").Inc()
		if r.Signer != a.self {
			a.emit("received", r.Workload, "revocation of epoch %d from %s, successor %s", r.Epoch, short(r.Signer), short(r.Successor))
		}
		effs = append(effs, a.m.ObserveRevocation(now, r)...)
	case in.grant != nil:
		e, err := a.m.Track(now, *in.grant)
		if err != nil {
			a.logger.Warn("lease grant refused", "workload", in.grant.ID, "err", err)
		} else if len(e) > 0 {
			a.refreshPolicy([]string{in.grant.ID})
		}
		effs = append(effs, e...)
	case in.exit != nil:
		effs = append(effs, a.m.ProcessExited(now, lease.ProcessExit{Workload: in.exit.ID, Epoch: in.exit.Epoch, Reason: in.exit.Reason})...)
	case in.respawn != nil:
		a.met.respawns.Inc()
		effs = append(effs, a.m.RespawnDone(now, *in.respawn)...)
	case in.claimAck != nil:
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
		effs = append(effs, a.m.ObserveClaim(now, c)...)
		if r := in.claimRead; r != nil && c.Workload == r.Workload && c.Claimer != a.self && c.Active && c.Epoch >= r.Epoch {
			rivals[c.Claimer] = true
		}
	}
	if in.claimRead != nil {
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
	if !a.m.AwaitingSync() || len(a.raw) > 0 || len(a.inputs) > 0 {
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
	start := time.Now()
	a.performEarly(ctx, now, effs)
	ids := effectIDs(effs)
	a.refreshPolicy(ids)
	rows := a.outboxRows(ctx, now, effs)

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
	ws := make([]lease.WorkloadSnapshot, 0, len(ids))
	for _, id := range ids {
		if w, ok := a.m.Workload(id); ok {
			ws = append(ws, w)
		}
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
	err := sqlitedb.InTxWait(ctx, a.db, a.cfg.CommitWait, func(tx *sql.Tx) error {
		if err := saveWorkloads(ctx, a.st, tx, ws); err != nil {
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
func (a *Agent) outboxRows(ctx context.Context, now time.Time, effs []lease.Effect) []outRow {
	var rows []outRow
	for _, e := range effs {
		if lease.DurabilityOf(e) != lease.Outbox {
			continue
		}
		at, claimTime := now, ""
		if w, ok := e.(lease.WithdrawClaim); ok {
			tctx, cancel := context.WithTimeout(ctx, a.cfg.CommitWait)
			t, err := a.claimTimes.next(tctx, a.st, w.ID, now)
			cancel()
			if err != nil {
				a.met.stepErrors.Inc()
				a.logger.Error("withdrawn marker", "workload", w.ID, "epoch", w.Epoch, "err", err)
				continue
			}
			at, claimTime = t, w.ID
		}
		ev, key, err := a.outboxEvent(e, at)
		if err == nil {
			var b []byte
			if b, err = json.Marshal(ev); err == nil {
				rows = append(rows, outRow{bundle: b, key: key, claimTime: claimTime})
				continue
			}
		}
		a.met.stepErrors.Inc()
		a.logger.Error("build outbox event", "effect", e.String(), "err", err)
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
			a.goFeedback(ctx, func(ctx context.Context) { a.publishClaim(ctx, e, at) })
		case lease.WithdrawClaim:
			a.met.promotions.WithLabelValues("withdrawn").Inc()
			a.emit("claim", e.ID, "claim for epoch %d withdrawn: the withdrawn marker is queued in the outbox", e.Epoch)
		case lease.AnnouncePromotion:
			a.met.promotions.WithLabelValues("announced").Inc()
			a.emit("claim", e.ID, "claim for epoch %d won: the Paygress-form announcement is queued in the outbox", e.Epoch)
		case lease.ReadClaims:
			a.goFeedback(ctx, func(ctx context.Context) { a.readClaims(ctx, e) })
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
		a.publishHeld()
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
// created at at, and the idempotency key of its outbox row.
func (a *Agent) outboxEvent(e lease.Effect, at time.Time) (*nostr.Event, string, error) {
	var ev *nostr.Event
	var key string
	var err error
	switch e := e.(type) {
	case lease.PublishRevocation:
		w, _ := a.m.Workload(e.ID)
		e.Reason = a.fenceReason(e.Reason, at)
		ev, err = heartbeat.BuildRevocationFor(a.keys, e, at, w.Spec.StateURI)
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

// readClaims waits until r.At, reads the workload's promotion claims from the
// relays, feeds each and reports the read.
func (a *Agent) readClaims(ctx context.Context, r lease.ReadClaims) {
	if !sleepCtx(ctx, r.At.Sub(a.now())) {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, a.claimIOTimeout())
	evs, eose := a.pool.Query(qctx, nostr.Filter{
		Kinds: []int{heartbeat.KindPromotion},
		Tags:  nostr.TagMap{"d": []string{heartbeat.ClaimDTag(r.ID), heartbeat.PromotionDTag(r.ID)}},
	})
	cancel()
	now := a.now()
	var claims []relayClaim
	for _, re := range evs {
		got, err := a.ingestor.Ingest(ctx, now, re.Event)
		if err != nil || got.Promotion == nil || got.Promotion.WorkloadID != r.ID {
			continue
		}
		claims = append(claims, relayClaim{p: got.Promotion, relay: re.Relay})
	}
	// feed converts the claims and counts the competing ones.
	a.send(ctx, input{claims: claims, claimRead: &lease.ClaimRead{Workload: r.ID, Epoch: r.Epoch, Relays: eose}})
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
		tracked := re.Event.Kind != heartbeat.KindHeartbeat && re.Event.Kind != heartbeat.KindHeartbeatEphemeral
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
		select {
		case a.inputs <- in:
		case <-ctx.Done():
			return nil
		}
	}
}

func (a *Agent) decode(ctx context.Context, now time.Time, re RelayEvent) (input, bool) {
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
		hb := heartbeat.HeartbeatInput(got.Heartbeat, re.Relay, now)
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

// heartbeatLoop publishes our heartbeats (both kinds) every interval.
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
		held := a.heldList()
		stored, eph, err := heartbeat.BuildHeartbeats(a.keys, heartbeat.HeartbeatParams{At: a.now(), Workloads: held, TTL: ttl})
		if err != nil {
			a.logger.Error("build heartbeat", "err", err)
		} else {
			timeout := min(a.cfg.PublishTimeout, a.cfg.Lease.HeartbeatInterval)
			pctx, cancel := context.WithTimeout(ctx, timeout)
			done := make(chan PublishResult, 1)
			go func() { done <- a.pool.Publish(pctx, eph) }()
			res := a.pool.Publish(pctx, stored)
			<-done
			cancel()
			ids := make([]string, len(held))
			for i, h := range held {
				ids[i] = fmt.Sprintf("%s@%d", h.ID, h.Epoch)
			}
			a.emit("heartbeat", "", "heartbeat published, accepted by %d of %d relays, listing [%s]", len(res.Accepted), a.cfg.Lease.N, strings.Join(ids, " "))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
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

// saveMeta persists the machine's relay tables, every workload whose
// snapshot changed since the last save, and the cursor (clamped to now).
// Only the changed rows are kept in memory (10,000 unchanged workloads cost
// a marshal each, not a copy), and they count as saved only once the
// transaction committed. Held (unpersisted) steps are committed first; while
// they cannot be, nothing is saved (ErrUnpersisted): the snapshot would
// record their state without their outbox rows.
func (a *Agent) saveMeta(ctx context.Context) error { return a.saveMetaRun(ctx, true) }

// saveMetaRun is saveMeta; run=false (shutdown) commits held steps without
// performing their deferred effects.
func (a *Agent) saveMetaRun(ctx context.Context, run bool) error {
	now := a.now()
	if !a.pend.empty() {
		a.pend.retryAt = time.Time{}
		if err := a.commitStep(ctx, now, nil, nil, nil, run); err != nil {
			return fmt.Errorf("save machine: %w: %w", ErrUnpersisted, err)
		}
	}
	snap := a.m.Snapshot()
	var changed []workloadRow
	hashes := map[string]uint64{}
	for i := range snap.Workloads {
		w := &snap.Workloads[i]
		b, err := json.Marshal(w)
		if err != nil {
			return fmt.Errorf("save machine: %w", err)
		}
		h := maphash.Bytes(saveSeed, b)
		if a.saved[w.Spec.ID] != h {
			r, err := rowOf(w)
			if err != nil {
				return err
			}
			changed = append(changed, r)
			hashes[w.Spec.ID] = h
		}
	}
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
	for id, h := range hashes {
		a.saved[id] = h
	}
	return nil
}

// applyCommands applies operator commands queued in the database.
func (a *Agent) applyCommands(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, a.cfg.CommitWait)
	cmds, err := ListCommands(lctx, a.db, true)
	cancel()
	if err != nil {
		a.logger.Error("read operator commands", "err", err)
		return
	}
	for _, c := range cmds {
		now := a.now()
		var effs []lease.Effect
		result := "ok"
		var release string
		switch c.Action {
		case "grant":
			if c.Spec == nil {
				result = "error: no spec"
				break
			}
			e, err := a.m.Track(now, *c.Spec)
			if err != nil {
				result = "error: " + err.Error()
			}
			effs = e
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
		seq := c.Seq
		err := a.commit(ctx, now, effs, func(tx *sql.Tx) error {
			if release != "" {
				if err := a.st.DeleteWorkload(ctx, tx, release); err != nil {
					return fmt.Errorf("delete workload %s: %w", release, err)
				}
				if err := a.claimTimes.forget(ctx, a.st, tx, release); err != nil {
					return err
				}
			}
			return markCommand(ctx, tx, seq, now, result)
		})
		if err != nil {
			a.logger.Error("apply operator command", "seq", c.Seq, "err", err)
			return
		}
		if release != "" {
			a.m.Remove(release)
			delete(a.saved, release)
			a.publishHeld()
			a.refreshPolicy([]string{release})
		}
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
