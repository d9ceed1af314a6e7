package agent

import (
	"context"
	"fmt"
	"time"

	"provideragent/driver"
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
	// Restore's effects first (a StopWorkload for every workload not held
	// here), then Outstanding's: lease/doc.go's restart protocol. The
	// stops are performed even if the commit fails (then the rest is held
	// and retried like any step); the outbox sends only after them.
	start := func() error { return a.sh.Start(ctx, a.now()) }
	if a.sh.Driver().Restored() {
		a.timedCommit(start)
	} else {
		_ = start()
	}
	a.m.turns.start = a.now()
	a.steps.last.Store(a.m.turns.start.UnixNano())
	tick := time.NewTicker(a.cfg.TickInterval)
	defer tick.Stop()
	cmds := time.NewTicker(time.Second)
	defer cmds.Stop()
	save := time.NewTicker(driver.SaveEvery)
	defer save.Stop()
	a.applyCommands(ctx)
	for {
		// in.hold (tests only) stops feeding inputs while ticks, saves
		// and shutdown go on: inputs then wait in their channel, ingested
		// but not applied.
		inputs, beats := a.in.inputs, a.in.beats
		if a.in.hold.Load() {
			inputs, beats = nil, nil
		}
		var backlogTurn, cmdsTurn <-chan struct{}
		if a.sh.Driver().Backlogged() {
			backlogTurn = closedChan
		}
		if a.m.cmdsMore {
			cmdsTurn = closedChan
		}
		var began time.Time
		kind := ""
		select {
		case <-ctx.Done():
			err := a.sh.Close(context.WithoutCancel(ctx), a.now())
			a.noteWrite(err)
			return err
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
			_ = a.sh.Driver().DrainBacklog(ctx, a.now())
			a.steps.last.Store(a.now().UnixNano())
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
			t := a.sh.Begin(now)
			a.applyMarks(t)
			t.Tick()
			a.timedCommit(func() error { return t.Commit(ctx) })
			a.steps.last.Store(now.UnixNano())
			a.watchQuorum(now)
			if a.m.heldDirty {
				a.publishHeld()
			}
			a.updateSubs(now)
			if now.Sub(a.m.status.refreshed) >= time.Second || (a.m.status.dirty && now.Sub(a.m.status.refreshed) >= statusEvery) {
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
			if err := a.saveMachine(ctx); err != nil {
				a.logger.Error("save machine", "err", err)
			}
		}
		a.noteTurn(kind, time.Since(began))
	}
}

// saveMachine is the periodic save (driver.Shell.Save, with the
// subscription cursor), its outcome noted for /healthz.
func (a *Agent) saveMachine(ctx context.Context) error {
	err := a.sh.Save(ctx, a.now())
	a.noteWrite(err)
	return err
}

// timedCommit runs a step's commit and observes how long it took
// (agent_step_seconds; errors are counted and logged by commitEvents).
func (a *Agent) timedCommit(commit func() error) {
	start := time.Now()
	if err := commit(); err == nil {
		a.obs.met.stepSeconds.Observe(time.Since(start).Seconds())
	}
}

// step feeds in and the inputs waiting after it, heartbeats first (only
// heartbeats when beatsOnly), up to maxBatch, as one step, and commits it.
func (a *Agent) step(ctx context.Context, in input, beatsOnly bool) {
	now := a.now()
	t := a.sh.Begin(now)
	a.feed(t, in)
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
		a.feed(t, in)
	}
	a.applyMarks(t)
	// Errors are logged and counted by commitEvents; a held step is
	// retried, its cursor tokens finished only once persisted.
	a.timedCommit(func() error { return t.Commit(ctx) })
	a.steps.last.Store(now.UnixNano())
	if a.m.status.dirty && now.Sub(a.m.status.refreshed) >= statusEvery {
		a.refreshStatus(now)
	}
}

// slowTurn is the longest a turn of the machine loop may take before
// inputs are late (the bound a mass transition must meet): a longer one
// is a WARN, at most once per slowTurnLogEvery.
const (
	slowTurn         = 250 * time.Millisecond
	slowTurnLogEvery = 10 * time.Second
)

// noteTurn records how long a turn of the machine loop took (StepMax) and
// warns, rate-limited, when it kept inputs waiting longer than slowTurn.
func (a *Agent) noteTurn(kind string, d time.Duration) {
	if int64(d) > a.steps.max.Load() {
		a.steps.max.Store(int64(d))
	}
	if d <= slowTurn {
		return
	}
	a.m.turns.slow++
	if now := time.Now(); now.Sub(a.m.turns.slowLogged) >= slowTurnLogEvery {
		a.logger.Warn("machine loop turn slow: inputs waited", "kind", kind, "took", d.Round(time.Millisecond),
			"slow_turns", a.m.turns.slow, "backlog", a.sh.Driver().BacklogLen())
		a.m.turns.slowLogged, a.m.turns.slow = now, 0
	}
}

// statusEvery is how often at most the status document is rebuilt while
// transitions happen.
const statusEvery = 100 * time.Millisecond

// StepMax returns the longest turn of the machine loop (a step with its
// commit, a backlog batch, a tick, a save) since the last ResetStepMax:
// how long inputs waited at worst (the mass-evict-step-ms benchmark).
func (a *Agent) StepMax() time.Duration { return time.Duration(a.steps.max.Load()) }

// ResetStepMax starts a new StepMax window.
func (a *Agent) ResetStepMax() { a.steps.max.Store(0) }

// feed applies one input to the turn t: the agent's own bookkeeping
// (the status view, metrics, the timeline) around driver.Turn.Feed.
func (a *Agent) feed(t *agentTurn, in input) {
	defer a.in.arrivals.Done(in.arrival)
	var din driver.Input
	if in.hasTok {
		tok := driver.Token(in.cursorTok)
		din.Token = &tok
	}
	switch {
	case in.hb != nil:
		if in.hb.Provider == a.me.self {
			// What it shows of its relay's stream comes in arrival
			// order (applyMarks); one served by ingest (a catch-up
			// copy, not known by id) shows nothing.
			in.hb.Unordered = true
		}
		din.Heartbeat = in.hb
		if in.hb.Provider != a.me.self {
			a.view.with(func(v *statusView) {
				for _, we := range in.hb.Workloads {
					if i, ok := v.idx[we.ID]; ok && v.status.Workloads[i].Epoch != we.Epoch {
						a.m.status.ids.add(we.ID) // a standby learns the epoch held
						a.m.status.dirty = true
					}
				}
			})
		}
	case in.rev != nil:
		a.m.status.ids.add(in.rev.WorkloadID)
		a.m.status.dirty = true
		w, _ := a.machine().Workload(in.rev.WorkloadID)
		r := heartbeat.RevocationInput(in.rev, w)
		a.obs.met.revocations.WithLabelValues("received").Inc()
		if r.Signer != a.me.self {
			a.emit("received", r.Workload, "revocation of epoch %d from %s, successor %s%s", r.Epoch, short(r.Signer), short(r.Successor), claimOnRevocation(a.machine(), r, a.now()))
		}
		din.Revocation = &r
	case in.grant != nil:
		a.m.subs.dirty = true
		din.Grant = in.grant
	case in.exit != nil:
		din.Exit = in.exit
	case in.respawn != nil:
		a.obs.met.respawns.Inc()
		din.Respawn = in.respawn
	case in.claimAck != nil:
		din.ClaimAck = in.claimAck
	case in.restored != nil:
		din.Restored = in.restored
	case in.handover != nil:
		applyHandover(t, in.handover)
	case in.clock != nil:
		a.clockVerdict(t.Step, *in.clock)
	}
	// As on the wire: lease decides what a Paygress announcement
	// (EpochUnknown) counts as.
	for _, pr := range in.claims {
		c := heartbeat.ClaimInput(pr.p, pr.relay)
		a.m.status.ids.add(c.Workload)
		a.m.status.dirty = true
		din.Claims = append(din.Claims, c)
	}
	din.ClaimRead = in.claimRead
	fed := t.Feed(din)
	switch {
	case in.grant != nil && fed.Err != nil:
		a.logger.Warn("lease grant refused", "workload", in.grant.ID, "err", fed.Err)
	case in.grant != nil:
		a.refreshPolicy([]string{in.grant.ID})
	case in.claimRead != nil:
		r := in.claimRead
		a.emit("read", r.Workload, "read claims for epoch %d on %d relays: %d competing", r.Epoch, r.Relays, fed.Competing)
	}
}

// relayClaim is a verified promotion claim (kind 38386) as one relay served
// it; feed converts it with heartbeat.ClaimInput.
type relayClaim struct {
	p     *heartbeat.Promotion
	relay string
}

// applyMarks feeds what the relays' streams showed (arrivals), each once
// every event that came before it has been fed: a gap, a sync (EOSE: the
// relay's stream is watched from now, and after a restart it counts toward
// rule 10's sync), our own heartbeat (the stream shows silence up to it).
func (a *Agent) applyMarks(t *agentTurn) {
	a.m.marks = a.in.arrivals.released(a.m.marks[:0])
	for _, m := range a.m.marks {
		synced := t.Mark(m.Mark)
		if m.Kind == driver.MarkSynced {
			a.m.quorum.synced[m.Relay] = true
		}
		if synced {
			a.emit("sync", "", "synced with %d relays: restored workloads may resume", len(a.m.quorum.synced))
		}
	}
}

// watchQuorum logs changes of this provider's own relay quorum and of
// relay connectivity, once per change (machine goroutine, every tick):
// losing quorum and regaining it are WARN lines (the first quorum after
// start is INFO), and so is having no relay connected at all (checked once
// PublishTimeout after the loop started, so that the first connections
// have time to come up); connections coming back after that are INFO.
func (a *Agent) watchQuorum(now time.Time) {
	q := a.machine().HasQuorum(now, a.me.self)
	if q != a.m.quorum.had {
		a.m.quorum.had = q
		up := a.connected()
		switch {
		case q && !a.m.quorum.ever:
			a.m.quorum.ever = true
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
	if now.Sub(a.m.turns.start) < a.cfg.PublishTimeout {
		return
	}
	none := a.connected() == 0
	if none == a.m.quorum.noRelays {
		return
	}
	a.m.quorum.noRelays = none
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

// claimOnRevocation says, for the event log, whether this provider may
// claim on revocation r until its deadline (lease.RevocationDeadline), when
// it is the successor: a revocation that carries no quorum time, or comes
// after its deadline, leaves the standby to the takeover rule.
func claimOnRevocation(m *lease.Machine, r lease.Revocation, now time.Time) string {
	if r.Successor != m.Self() {
		return ""
	}
	by := m.RevocationDeadline(r)
	switch {
	case by.IsZero():
		return " (it names no time its holder had relay quorum: no claim on it, the takeover rule decides)"
	case !now.Before(by):
		return fmt.Sprintf(" (after its deadline %s: no claim on it, the takeover rule decides)", by.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf(" (may claim on it until %s)", by.UTC().Format(time.RFC3339))
}
