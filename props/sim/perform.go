package sim

// The driver's Performer and Events over the simulated world: every effect
// through lease.Perform, the process operations released by the shell
// (simProcesses: the simulated backend, performed at once).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// simEvents is the node's driver.Events: timeline lines.
type simEvents struct{ n *LeaseNode }

func (simEvents) Attempted(error) {}

func (e simEvents) Held(err error, steps int, first bool) {
	if first {
		e.n.env.Logf("database refuses commits (%v): stops performed, the rest held", err)
	}
}

func (e simEvents) Persisted(steps int, since, now time.Time) {
	e.n.env.Logf("database commits succeed again: %d held steps persisted", steps)
}

func (simEvents) Backlog(int) {}

func (simEvents) Saved(int) {}

func (e simEvents) Dropped(eff lease.Effect, err error) {
	e.n.fail(fmt.Errorf("outbox event of %s: %w", eff, err))
}

// simPerformer is the node's driver.Performer: lease.Perform's table over
// the simulated world.
type simPerformer struct{ n *LeaseNode }

func (p simPerformer) Perform(e lease.Effect, at time.Time) {
	if p.n.halted {
		return // the agent died before performing it
	}
	lease.Perform(performer{n: p.n, env: p.n.env, now: p.n.now, at: at}, e)
}

// performer is the lease.Performer for one effect.
type performer struct {
	n   *LeaseNode
	env Env
	now time.Time
	at  time.Time
}

func (p performer) Record(e lease.Effect) {
	switch e := e.(type) {
	case lease.EnteredState:
		p.env.Logf("%s -> %s (epoch %d)", orNew(e.From), e.To, e.Epoch)
	case lease.Failed:
		p.env.Logf("FAILED: %s", e.Reason)
	case lease.QuorumReport:
		p.env.Logf("quorum report (lost at %s)", e.LostAt.Format(time.TimeOnly))
	case lease.RestoreReport:
		p.env.Logf("restore of epoch %d: %s: %s", e.Epoch, e.Phase, e.Reason)
	default:
		p.n.fail(fmt.Errorf("unknown effect %T: %s", e, strings.TrimSpace(e.String())))
	}
}

// Start starts the process; the database must already hold the workload
// at that epoch (a start performed before its step was committed would
// run a copy a crash forgets).
// A start during a planned move of the workload is dropped (the agent's
// actuator drops it: the move restarts the copy if it aborts).
func (p performer) Start(e lease.StartWorkload) {
	p.checkPersisted(e.ID, e.Epoch, "start")
	if mv := p.n.moves[e.ID]; mv != nil && mv.epoch == e.Epoch {
		p.env.Logf("start of epoch %d dropped: a move is under way", e.Epoch)
		return
	}
	p.n.sh.Enqueue(context.Background(), driver.Op{Kind: driver.OpStart, Workload: e.ID, Epoch: e.Epoch})
}

// Stop stops the process; a durable copy writes its final checkpoint first
// (SIGTERM), which is published only while the machine holds it Live.
func (p performer) Stop(e lease.StopWorkload) {
	p.n.sh.Enqueue(context.Background(), driver.Op{Kind: driver.OpStop, Workload: e.ID, Epoch: e.Epoch, Reason: e.Reason})
	p.env.Logf("  stop reason: %s", e.Reason)
}

// Respawn restarts at once (lease emits it only when due); RespawnDone
// follows as the next input.
func (p performer) Respawn(e lease.AttemptRespawn) {
	p.checkPersisted(e.ID, e.Epoch, "respawn")
	p.env.Logf("respawn attempt %d", e.Attempt)
	p.n.sh.Enqueue(context.Background(), driver.Op{Kind: driver.OpRespawn, Workload: e.ID, Epoch: e.Epoch, Attempt: e.Attempt})
}

// simProcesses is the node's driver.Processes: the simulated backend, each
// operation performed at once.
type simProcesses struct{ n *LeaseNode }

func (simProcesses) Go(work func()) { work() }

func (p simProcesses) Running(id string) bool {
	_, ok := p.n.env.Running(id)
	return ok
}

func (p simProcesses) Run(_ context.Context, op driver.Op) {
	n := p.n
	switch op.Kind {
	case driver.OpStart:
		n.startCopy(op.Workload, op.Epoch)
	case driver.OpStop:
		n.stopCopy(op.Workload)
		n.env.Stop(op.Workload)
	case driver.OpRespawn:
		n.startCopy(op.Workload, op.Epoch)
		n.env.At(n.now, timerRespawn{workload: op.Workload, epoch: op.Epoch, attempt: op.Attempt})
	}
}

func (p performer) checkPersisted(id string, epoch uint64, what string) {
	r, ok := p.n.disk.store.Rows[id]
	if !ok || !r.State.Holding() || r.Epoch != epoch {
		p.n.fail(fmt.Errorf("%s of %s at epoch %d before its step was committed (the database holds %q at epoch %d)", what, id, epoch, r.State, r.Epoch))
	}
}

// Queue reports an outbox effect: its row was committed with the step, and
// the node sends it (wrote).
func (p performer) Queue(e lease.Effect) {
	env, n := p.env, p.n
	switch e := e.(type) {
	case lease.PublishRevocation:
		env.Logf("publishes revocation of epoch %d, successor %s (%s)", e.Epoch, n.name(e.Successor), e.Reason)
		succ, ok := n.keys[e.Successor]
		if !ok {
			succ = -1
		}
		env.Report(RevocationPublished{Workload: e.ID, Epoch: e.Epoch, Successor: succ})
	case lease.WithdrawClaim:
		env.Logf("withdraws claim for epoch %d", e.Epoch)
	case lease.AnnouncePromotion:
		env.Logf("announces its promotion at epoch %d", e.Epoch)
	}
}

func (p performer) PublishClaim(e lease.PublishClaim) {
	env, n := p.env, p.n
	env.Logf("publishes claim for epoch %d", e.Epoch)
	if w, ok := n.d.Machine().Workload(e.ID); ok && w.Trigger == lease.TriggerTakeover && !n.reissuing {
		env.Report(TakeoverClaim{Workload: e.ID, Epoch: w.Epoch})
	}
	id := env.Publish(Event{Kind: KindClaim, CreatedAt: p.at.Unix(), D: ClaimD(e.ID), Body: LeaseClaim{
		Workload: e.ID, Epoch: e.Epoch, Active: true,
	}}, nil)
	n.pubs[id] = &claimPub{workload: e.ID, epoch: e.Epoch}
}

func (p performer) ReadClaims(e lease.ReadClaims) {
	p.env.At(e.At, timerRead{workload: e.ID, epoch: e.Epoch})
}

func orNew(s lease.State) string {
	if s == "" {
		return "(new)"
	}
	return string(s)
}
