package agent

import (
	"context"
	"time"

	"provideragent/agent/store"
	"provideragent/heartbeat"
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
	a.turns.start = a.now()
	a.turns.lastStep.Store(a.turns.start.UnixNano())
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
		inputs, beats := a.in.inputs, a.in.beats
		if a.holdInputs.Load() {
			inputs, beats = nil, nil
		}
		var backlogTurn, cmdsTurn <-chan struct{}
		if !a.commits.bl.empty() {
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
			a.turns.lastStep.Store(a.now().UnixNano())
		case <-tick.C:
			began = time.Now()
			kind = "tick"
			// The heartbeats that arrived during a long turn count before
			// the tick judges quorum (they carry their arrival times):
			// those queued now, not those that keep arriving meanwhile, so
			// that no input rate keeps the tick from running.
			for n := len(a.in.beats); n > 0; n -= maxBatch {
				a.step(ctx, <-a.in.beats, true)
			}
			now := a.now()
			effs := a.syncRelays(now)
			effs = append(effs, a.m.Tick(now)...)
			_ = a.commit(ctx, now, effs, nil)
			a.turns.lastStep.Store(now.UnixNano())
			a.watchQuorum(now)
			if a.beat.dirty {
				a.publishHeld()
			}
			a.updateSubs(now)
			if now.Sub(a.view.refreshed) >= time.Second || (a.view.dirty && now.Sub(a.view.refreshed) >= statusEvery) {
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
		case in = <-a.in.beats:
		default:
			if beatsOnly {
				break drain
			}
			select {
			case in = <-a.in.inputs:
			default:
				break drain
			}
		}
		effs, cursors = a.feed(now, in, effs, cursors)
	}
	// Errors are logged and counted by commitStep; the step is held and
	// retried, its cursor tokens finished only once persisted.
	_ = a.commitStep(ctx, now, effs, cursors, nil, true)
	a.turns.lastStep.Store(now.UnixNano())
	if a.view.dirty && now.Sub(a.view.refreshed) >= statusEvery {
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
	if int64(d) > a.turns.stepMax.Load() {
		a.turns.stepMax.Store(int64(d))
	}
	if d <= slowTurn {
		return
	}
	a.turns.slow++
	if now := time.Now(); now.Sub(a.turns.slowLogged) >= slowTurnLogEvery {
		a.logger.Warn("machine loop turn slow: inputs waited", "kind", kind, "took", d.Round(time.Millisecond),
			"slow_turns", a.turns.slow, "backlog", a.commits.bl.len())
		a.turns.slowLogged, a.turns.slow = now, 0
	}
}

// statusEvery is how often at most the status document is rebuilt while
// transitions happen.
const statusEvery = 100 * time.Millisecond

// StepMax returns the longest turn of the machine loop (a step with its
// commit, a backlog batch, a tick, a save) since the last ResetStepMax:
// how long inputs waited at worst (the mass-evict-step-ms benchmark).
func (a *Agent) StepMax() time.Duration { return time.Duration(a.turns.stepMax.Load()) }

// ResetStepMax starts a new StepMax window.
func (a *Agent) ResetStepMax() { a.turns.stepMax.Store(0) }

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
					a.commits.dirty.add(we.ID)
					if i, ok := a.view.idx[we.ID]; ok && a.view.status.Workloads[i].Epoch != we.Epoch {
						a.view.ids.add(we.ID) // a standby learns the epoch held
						a.view.dirty = true
					}
				}
			}
		}
	case in.rev != nil:
		a.commits.dirty.add(in.rev.WorkloadID)
		a.view.ids.add(in.rev.WorkloadID)
		a.view.dirty = true
		w, _ := a.m.Workload(in.rev.WorkloadID)
		r := heartbeat.RevocationInput(in.rev, w)
		a.met.revocations.WithLabelValues("received").Inc()
		if r.Signer != a.self {
			a.emit("received", r.Workload, "revocation of epoch %d from %s, successor %s", r.Epoch, short(r.Signer), short(r.Successor))
		}
		effs = append(effs, a.m.ObserveRevocation(now, r)...)
	case in.grant != nil:
		a.commits.dirty.add(in.grant.ID)
		a.subs.dirty = true
		e, err := a.m.Track(now, *in.grant)
		if err != nil {
			a.logger.Warn("lease grant refused", "workload", in.grant.ID, "err", err)
		} else if len(e) > 0 {
			a.refreshPolicy([]string{in.grant.ID})
		}
		effs = append(effs, e...)
	case in.exit != nil:
		a.commits.dirty.add(in.exit.Workload)
		effs = append(effs, a.m.ProcessExited(now, *in.exit)...)
	case in.respawn != nil:
		a.commits.dirty.add(in.respawn.Workload)
		a.met.respawns.Inc()
		effs = append(effs, a.m.RespawnDone(now, *in.respawn)...)
	case in.claimAck != nil:
		a.commits.dirty.add(in.claimAck.Workload)
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
		a.commits.dirty.add(c.Workload)
		a.view.ids.add(c.Workload)
		a.view.dirty = true
		a.commits.rivalWatch.add(c.Workload) // a rival may be adopted by a later Tick
		effs = append(effs, a.m.ObserveClaim(now, c)...)
		if r := in.claimRead; r != nil && c.Workload == r.Workload && c.Claimer != a.self && c.Active && c.Epoch >= r.Epoch {
			rivals[c.Claimer] = true
		}
	}
	if in.claimRead != nil {
		a.commits.dirty.add(in.claimRead.Workload)
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
	if !a.m.AwaitingSync() || len(a.in.received) > 0 || a.in.routed.Load() > 0 || len(a.in.raw) > 0 || len(a.in.inputs) > 0 || len(a.in.beats) > 0 {
		return nil
	}
	var out []lease.Effect
	for _, r := range a.pool.Status() {
		if r.EOSE && !a.quorum.synced[r.URL] {
			a.quorum.synced[r.URL] = true
			out = append(out, a.m.RelaySynced(now, r.URL)...)
		}
	}
	if !a.m.AwaitingSync() {
		a.emit("sync", "", "synced with %d relays: restored workloads may resume", len(a.quorum.synced))
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
	if q != a.quorum.had {
		a.quorum.had = q
		up := a.connected()
		switch {
		case q && !a.quorum.ever:
			a.quorum.ever = true
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
	if now.Sub(a.turns.start) < a.cfg.PublishTimeout {
		return
	}
	none := a.connected() == 0
	if none == a.quorum.noRelays {
		return
	}
	a.quorum.noRelays = none
	if none {
		a.logger.Warn("no relay connected", "relays", a.cfg.Lease.N)
		a.emit("relays", "", "no relay connected")
	} else {
		a.logger.Info("relay connected again", "connected", a.connected(), "relays", a.cfg.Lease.N)
		a.emit("relays", "", "relay connected again")
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
