package agent

// The agent's side of the driver's step: performing effects (performer),
// building the events a step's outbox effects queue (eventBuilder), what
// an operator is told of commits (commitEvents), and the claim step's
// publishes.

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/driver"
	"provideragent/heartbeat"
	"provideragent/lease"
	"provideragent/relay"
)

// eventBuilder is the driver's Outbox: it signs the events of a step's
// outbox effects (the revocations, withdrawn markers and announcements),
// before the transaction that queues them. Signing, the costly part, runs
// on every core for a big step.
type eventBuilder struct{ a *Agent }

func (b eventBuilder) Build(jobs []driver.OutboxJob) []driver.OutboxResult[[]byte] {
	a := b.a
	res := make([]driver.OutboxResult[[]byte], len(jobs))
	// The fence wording reads the relays' refusals once per step time.
	var words wordingCache
	for i := range jobs {
		if r, ok := jobs[i].Effect.(lease.PublishRevocation); ok {
			r.Reason = words.get(jobs[i].At, 0, a.fenceWording)(r.Reason)
			jobs[i].Effect = r
		}
	}
	build := func(i int) {
		j := jobs[i]
		if w, ok := j.Effect.(lease.WithdrawClaim); ok && !a.claims.publishes.withdrawNeeded(w.ID, w.Epoch) {
			res[i].Unneeded = true // no relay was sent the claim
			return
		}
		ev, key, err := a.outboxEvent(j.Effect, j.At, a.ckpt.revocationStateURI(j.Effect, j.Workload.Spec))
		if err == nil {
			var payload []byte
			if payload, err = json.Marshal(ev); err == nil {
				res[i].Row = driver.OutboxRow[[]byte]{Key: key, Payload: payload}
				return
			}
		}
		res[i].Err = err
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
	return res
}

// commitEvents is the driver's Events: logs, metrics, /healthz and the
// timeline.
type commitEvents struct{ a *Agent }

func (c commitEvents) Attempted(err error) {
	c.a.noteWrite(err)
	if err != nil {
		c.a.obs.met.stepErrors.Inc()
	}
}

func (c commitEvents) Held(err error, steps int, first bool) {
	a := c.a
	if first {
		a.logger.Error("database write failed: fencing continues; starts, claims and revocations wait until a step persists",
			"err", err, "retry_every", driver.DefaultConfig().RetryEvery)
		a.emit("persist", "", "step not persisted (%v): stops performed, the rest held back", err)
		return
	}
	a.logger.Debug("database write still failing", "err", err, "held_steps", steps)
}

func (c commitEvents) Persisted(steps int, since, now time.Time) {
	a := c.a
	a.logger.Warn("database writable again: held machine steps persisted", "steps", steps, "after", now.Sub(since).Round(time.Millisecond))
	a.emit("persist", "", "%d held steps persisted after %v", steps, now.Sub(since).Round(time.Millisecond))
}

func (c commitEvents) Backlog(n int) { c.a.obs.met.backlog.Set(float64(n)) }

func (c commitEvents) Saved(rows int) { c.a.obs.met.savedRows.Add(float64(rows)) }

func (c commitEvents) Dropped(e lease.Effect, err error) {
	c.a.obs.met.stepErrors.Inc()
	c.a.logger.Error("build outbox event", "effect", e.String(), "err", err)
}

// performer is the driver's Performer: each effect through lease.Perform
// (the table the simulator shares). Backend work and network waits go to
// owned goroutines that report back as inputs; ctx is the run's lifetime,
// set by Run before the machine loop starts.
type performer struct {
	a     *Agent
	ctx   context.Context
	words wordingCache // the fence wording, read at most once a second
}

// wordingCache keeps the fence wording (fenceWording: the relays' refusals
// of our heartbeats, which a mass eviction would otherwise read from the
// pool once per workload).
type wordingCache struct {
	word func(string) string
	at   time.Time
}

// get returns the wording made at now, or the cached one when it was made
// at most maxAge before now (0: at the same instant).
func (c *wordingCache) get(now time.Time, maxAge time.Duration, build func(time.Time) func(string) string) func(string) string {
	if c.word == nil || now.Before(c.at) || now.Sub(c.at) > maxAge {
		c.word, c.at = build(now), now
	}
	return c.word
}

// Perform carries out one effect the driver hands over; at is the
// created_at the driver gave a PublishClaim's claim (zero for the others).
func (p *performer) Perform(e lease.Effect, at time.Time) {
	a := p.a
	p.words.get(a.now(), time.Second, a.fenceWording)
	a.obs.met.effects.WithLabelValues(effectType(e)).Inc()
	a.logger.Debug("effect", "effect", e.String())
	a.refreshPolicy([]string{e.Workload()})
	lease.Perform(performCall{performer: p, at: at}, e)
}

var _ lease.Performer = performCall{}

// performCall is the lease.Performer of one effect: the performer, and the
// created_at the driver gave the effect's event (a PublishClaim's claim),
// which only PublishClaim reads.
type performCall struct {
	*performer
	at time.Time
}

func (p *performer) Record(e lease.Effect) {
	a := p.a
	switch e := e.(type) {
	case lease.EnteredState:
		a.ckpt.noteState(e)
		from := string(e.From)
		if from == "" {
			from = "new"
		}
		a.obs.met.transitions.WithLabelValues(from, string(e.To)).Inc()
		a.logger.Info("workload state", "workload", e.ID, "from", from, "to", e.To, "epoch", e.Epoch)
		a.m.status.ids.add(e.ID)
		if e.From == "" || e.To.Terminal() {
			a.m.subs.dirty = true
		}
		if a.me.onEvent != nil {
			a.me.onEvent(Event{Time: a.now(), Agent: a.me.name, Kind: "state", Workload: e.ID,
				Detail: fmt.Sprintf("%s -> %s (epoch %d)", from, e.To, e.Epoch), State: string(e.To), Epoch: e.Epoch})
		}
		a.m.heldDirty = true // publishHeld on the next tick
		a.m.status.dirty = true
	case lease.Failed:
		a.logger.Error("workload failed", "workload", e.ID, "epoch", e.Epoch, "reason", e.Reason)
		a.emit("failed", e.ID, "failed at epoch %d: %s", e.Epoch, e.Reason)
	case lease.RestoreReport:
		switch e.Phase {
		case lease.RestoreDone:
			a.logger.Info("workload state restored", "workload", e.ID, "epoch", e.Epoch, "reason", e.Reason)
		case lease.RestoreFresh:
			a.logger.Error("workload starts without a checkpoint", "workload", e.ID, "epoch", e.Epoch, "reason", e.Reason)
		default:
			a.logger.Warn("workload waits for its checkpoint", "workload", e.ID, "epoch", e.Epoch, "phase", e.Phase, "reason", e.Reason)
		}
		a.emit("restore", e.ID, "epoch %d: %s: %s", e.Epoch, e.Phase, e.Reason)
	case lease.QuorumReport:
		a.logger.Warn("workload without standby lacks relay quorum; it keeps running", "workload", e.ID, "since", e.LostAt)
		a.emit("quorum", e.ID, "no quorum since %s; no standby, keeps running", e.LostAt.Format(time.TimeOnly))
	default:
		a.logger.Warn("effect recorded only", "effect", e.String())
	}
}

func (p *performer) Start(e lease.StartWorkload) {
	// A restore attempt the machine ended without its answer places
	// nothing once the workload runs: it could overwrite the run's own
	// checkpoint.
	p.a.ckpt.cancelRestore(e.ID, 1)
	w, _ := p.a.machine().Workload(e.ID)
	p.a.emit("start", e.ID, "start workload process at epoch %d", e.Epoch)
	p.a.sh.Enqueue(p.ctx, driver.Op{Kind: driver.OpStart, Workload: e.ID, Epoch: e.Epoch, Command: w.Spec.Command, Prepare: p.a.ckpt.localRecovery(w)})
	p.a.ckpt.watch(w, e.Epoch)
}

func (p *performer) Stop(e lease.StopWorkload) {
	a := p.a
	a.ckpt.cancelRestore(e.ID, 0)
	a.ckpt.unwatch(e.ID)
	if a.sh.Fenced(e.ID) {
		// Repeated stops (Restore re-issues one for every workload not
		// held here) are no-ops: nothing runs or is queued.
		a.logger.Debug("stop workload: not running here", "workload", e.ID, "epoch", e.Epoch)
		return
	}
	reason := p.words.word(e.Reason)
	a.emit("stop", e.ID, "FENCE: stop workload process (epoch %d): %s", e.Epoch, reason)
	a.sh.Enqueue(p.ctx, driver.Op{Kind: driver.OpStop, Workload: e.ID, Epoch: e.Epoch})
}

func (p *performer) Respawn(e lease.AttemptRespawn) {
	w, _ := p.a.machine().Workload(e.ID)
	p.a.emit("respawn", e.ID, "respawn attempt %d (due %s)", e.Attempt, e.At.Format(time.TimeOnly))
	p.a.sh.Enqueue(p.ctx, driver.Op{Kind: driver.OpRespawn, Workload: e.ID, Epoch: e.Epoch, Command: w.Spec.Command, Attempt: e.Attempt, Prepare: p.a.ckpt.localRecovery(w)})
}

// Queue reports an outbox effect: its row was committed with the step
// (outboxRows), and the courier sends it.
func (p *performer) Queue(e lease.Effect) {
	a := p.a
	switch e := e.(type) {
	case lease.PublishRevocation:
		a.obs.met.revocations.WithLabelValues("queued").Inc()
		quorum := "its standby waits for the takeover rule: no heartbeat of this epoch came back from M relays"
		if !e.QuorumAt.IsZero() {
			quorum = "quorum at " + e.QuorumAt.UTC().Format(time.RFC3339)
		}
		a.emit("revocation", e.ID, "revocation of epoch %d queued in the outbox (successor %s, %s): %s", e.Epoch, short(e.Successor), quorum, e.Reason)
	case lease.WithdrawClaim:
		a.obs.met.promotions.WithLabelValues("withdrawn").Inc()
		a.emit("claim", e.ID, "claim for epoch %d withdrawn: the withdrawn marker is queued in the outbox (none when no relay was sent the claim)", e.Epoch)
	case lease.AnnouncePromotion:
		a.obs.met.promotions.WithLabelValues("announced").Inc()
		a.emit("claim", e.ID, "claim for epoch %d won: the Paygress-form announcement is queued in the outbox", e.Epoch)
	}
}

// PublishClaim queues the claim, created at c.at, for the claim
// publishers (claimPublishLoop: at most maxClaimPublishes at once, off the
// machine goroutine), which report how many relays accepted it
// (ClaimPublished).
func (c performCall) PublishClaim(e lease.PublishClaim) {
	c.a.obs.met.promotions.WithLabelValues("claimed").Inc()
	c.a.claims.publishes.add(e, c.at)
}

// Restore fetches and places the checkpoint a new epoch starts from, off
// the machine goroutine (like a claim read), and reports the outcome as
// the machine's input. A stop of the workload cancels it.
func (p *performer) Restore(e lease.RestoreCheckpoint) {
	a := p.a
	w, ok := a.machine().Workload(e.ID)
	req := a.ckpt.restoreRequest(e, w, ok)
	ctx, done := a.ckpt.beginRestore(p.ctx, e)
	a.emit("restore", e.ID, "restoring the checkpoint of epoch %d's predecessors (attempt %d, %s, within %v)", e.Epoch, e.Attempt, e.Mode, e.Timeout)
	a.goFeedback(ctx, func(ctx context.Context) {
		defer done()
		r := a.ckpt.runRestore(ctx, req)
		a.ckpt.countRestore(e.Mode, r)
		a.send(p.ctx, input{restored: &r})
	})
}

func (p *performer) ReadClaims(e lease.ReadClaims) {
	p.a.claims.reads.add(e) // batched with the other reads due (claimreads.go)
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
	case lease.RestoreCheckpoint:
		return "restore_checkpoint"
	case lease.RestoreReport:
		return "restore_report"
	}
	return "other"
}

func (a *Agent) goFeedback(ctx context.Context, f func(context.Context)) {
	a.claims.wg.Add(1)
	go func() {
		defer a.claims.wg.Done()
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
		ev, err = heartbeat.BuildRevocationFor(a.me.keys, e, at, stateURI)
		key = fmt.Sprintf("revocation:%s:%d", e.ID, e.Epoch)
	case lease.WithdrawClaim:
		ev, err = heartbeat.BuildWithdrawFor(a.me.keys, e, at)
		key = fmt.Sprintf("withdraw:%s:%d:%d", e.ID, e.Epoch, at.Unix())
	case lease.AnnouncePromotion:
		ev, err = heartbeat.BuildAnnouncementFor(a.me.keys, e, at)
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
	ev, err := heartbeat.BuildClaimFor(a.me.keys, e, at)
	if err != nil {
		a.logger.Error("build promotion claim", "workload", e.ID, "err", err)
		a.send(ctx, input{claimAck: &lease.ClaimAck{Workload: e.ID, Epoch: e.Epoch}})
		return
	}
	// No longer than the claim step has left: an answer after it cannot count.
	wait := min(a.claimIOTimeout(), claimDeadline(at, a.cfg.Lease.ClaimTimeout).Sub(a.now()))
	pctx, cancel := context.WithTimeout(ctx, wait)
	res := a.pool.Publish(pctx, ev)
	cancel()
	a.noteClaimAnswers(res)
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

// onOutboxAttempt is called after every publish attempt of the outbox.
func (a *Agent) onOutboxAttempt(ev *nostr.Event, res relay.PublishResult) {
	if ev.Kind != heartbeat.KindRevocation || len(res.Accepted) >= a.cfg.Lease.M {
		return
	}
	// Once per event: the outbox may retry many times.
	var seen bool
	a.out.revReports.with(func(r *revocationReports) {
		seen = (*r)[ev.ID]
		(*r)[ev.ID] = true
	})
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
func (a *Agent) onOutboxAck(ev *nostr.Event, res relay.PublishResult) {
	if ev.Kind == heartbeat.KindRevocation {
		a.obs.met.revocations.WithLabelValues("sent").Inc()
		a.emit("revocation", tagValue(ev, "workload"), "revocation delivered: accepted by %d relays (%s)", len(res.Accepted), strings.Join(res.Accepted, " "))
	}
}
