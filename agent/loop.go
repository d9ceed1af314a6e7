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
		effs := a.restored
		a.restored = nil
		if err := a.commit(ctx, a.now(), effs, nil); err != nil {
			return err
		}
	}
	// The outbox may send now: every restored stop is performed or queued
	// (the fence gate holds a revocation until its stop finished).
	close(a.restoredDone)
	a.lastStep.Store(a.now().UnixNano())
	tick := time.NewTicker(a.cfg.TickInterval)
	defer tick.Stop()
	cmds := time.NewTicker(time.Second)
	defer cmds.Stop()
	save := time.NewTicker(5 * time.Second)
	defer save.Stop()
	a.applyCommands(ctx)
	for {
		select {
		case <-ctx.Done():
			return a.saveMeta(context.WithoutCancel(ctx))
		case in := <-a.inputs:
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
			if err := a.commit(ctx, now, effs, nil); err != nil {
				a.met.stepErrors.Inc()
				a.logger.Error("persist step", "err", err)
				if ctx.Err() != nil {
					return nil
				}
			}
			for _, c := range cursors {
				a.cursor.Done(c)
			}
			a.lastStep.Store(now.UnixNano())
			if a.statusDirty && now.Sub(a.lastStat) >= 100*time.Millisecond {
				a.refreshStatus(now)
			}
		case <-tick.C:
			now := a.now()
			effs := a.syncRelays(now)
			effs = append(effs, a.m.Tick(now)...)
			if err := a.commit(ctx, now, effs, nil); err != nil {
				a.met.stepErrors.Inc()
				a.logger.Error("persist tick", "err", err)
			}
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

func (a *Agent) watchQuorum(now time.Time) {
	q := a.m.HasQuorum(now, a.self)
	if q == a.hadQuorum {
		return
	}
	a.hadQuorum = q
	if q {
		a.emit("quorum", "", "own heartbeats seen on >= %d of %d relays: quorum", a.cfg.Lease.M, a.cfg.Lease.N)
	} else {
		a.emit("quorum", "", "own heartbeats on fewer than %d relays: quorum LOST", a.cfg.Lease.M)
	}
}

// commit persists the workloads the effects concern, with the outbox rows of
// their revocations, in one transaction, then performs the effects.
func (a *Agent) commit(ctx context.Context, now time.Time, effs []lease.Effect, extra func(tx *sql.Tx) error) error {
	if len(effs) == 0 && extra == nil {
		return nil
	}
	start := time.Now()
	seen := map[string]bool{}
	var ws []lease.WorkloadSnapshot
	var ids []string
	for _, e := range effs {
		id := e.Workload()
		if seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
		if w, ok := a.m.Workload(id); ok {
			ws = append(ws, w)
		}
	}
	// created_at of claims and withdrawn markers, strictly increasing per
	// workload (claimtime.go), persisted with the step.
	var stamps []time.Time
	var stamped []string
	for i, e := range effs {
		var id string
		switch e := e.(type) {
		case lease.PublishClaim:
			id = e.ID
		case lease.WithdrawClaim:
			id = e.ID
		default:
			continue
		}
		at, err := a.claimTimes.next(ctx, a.st, id, now)
		if err != nil {
			return err
		}
		if stamps == nil {
			stamps = make([]time.Time, len(effs))
		}
		stamps[i] = at
		stamped = append(stamped, id)
	}
	// Sign the outbox effects' events before the transaction (no I/O inside
	// it but SQL): lease.DurabilityOf says which effects leave through the
	// durable outbox, committed with the step.
	type outRow struct {
		bundle []byte
		key    string
	}
	var rows []outRow
	for i, e := range effs {
		if lease.DurabilityOf(e) != lease.Outbox {
			continue
		}
		at := now
		if i < len(stamps) && !stamps[i].IsZero() {
			at = stamps[i]
		}
		ev, key, err := a.outboxEvent(e, at)
		if err != nil {
			return err
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode %s: %w", e, err)
		}
		rows = append(rows, outRow{bundle: b, key: key})
	}
	err := sqlitedb.InTx(ctx, a.db, func(tx *sql.Tx) error {
		if err := saveWorkloads(ctx, a.st, tx, ws); err != nil {
			return err
		}
		if err := a.claimTimes.save(ctx, a.st, tx, stamped); err != nil {
			return err
		}
		for _, r := range rows {
			if _, err := a.outbox.SendTx(ctx, tx, r.bundle, "agent", courier.SendOptions{IdempotencyKey: r.key}); err != nil &&
				!errors.Is(err, courier.ErrIdempotencyConflict) {
				return fmt.Errorf("queue %s: %w", r.key, err)
			}
		}
		if extra != nil {
			return extra(tx)
		}
		return nil
	})
	a.noteWrite(err)
	if err != nil {
		return fmt.Errorf("commit step: %w", err)
	}
	a.refreshPolicy(ids)
	a.perform(ctx, now, effs, stamps)
	a.met.stepSeconds.Observe(time.Since(start).Seconds())
	return nil
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
			a.emit("stop", e.ID, "FENCE: stop workload process (epoch %d): %s", e.Epoch, e.Reason)
			a.act.enqueue(ctx, e.ID, op{kind: opStop, epoch: e.Epoch, reason: e.Reason})
		case lease.PublishRevocation:
			a.met.revocations.WithLabelValues("queued").Inc()
			a.emit("revocation", e.ID, "revocation of epoch %d queued in the outbox (successor %s): %s", e.Epoch, short(e.Successor), e.Reason)
		case lease.PublishClaim:
			a.met.promotions.WithLabelValues("claimed").Inc()
			a.goFeedback(ctx, func(ctx context.Context) { a.publishClaim(ctx, e.ID, e.Epoch, heartbeat.ClaimActive, at) })
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
		ev, err = heartbeat.BuildRevocation(a.keys, heartbeat.RevocationParams{
			WorkloadID: e.ID, Standbys: e.Standbys, Reason: e.Reason, At: at,
			StateURI: w.Spec.StateURI, Successor: e.Successor, Epoch: e.Epoch,
		})
		key = fmt.Sprintf("revocation:%s:%d", e.ID, e.Epoch)
	case lease.WithdrawClaim:
		ev, err = heartbeat.BuildPromotion(a.keys, heartbeat.PromotionParams{WorkloadID: e.ID, At: at, Epoch: e.Epoch, Status: heartbeat.ClaimWithdrawn})
		key = fmt.Sprintf("withdraw:%s:%d:%d", e.ID, e.Epoch, at.Unix())
	case lease.AnnouncePromotion:
		ev, err = heartbeat.BuildAnnouncement(a.keys, heartbeat.AnnouncementParams{WorkloadID: e.ID, At: at, Epoch: e.Epoch})
		key = fmt.Sprintf("announcement:%s:%d", e.ID, e.Epoch)
	default:
		return nil, "", fmt.Errorf("%s is not an outbox effect", e)
	}
	if err != nil {
		return nil, "", fmt.Errorf("build %s: %w", e, err)
	}
	return ev, key, nil
}

// publishClaim publishes a promotion claim (or withdrawn marker) created at
// at and, for an active claim, reports how many relays accepted it.
func (a *Agent) publishClaim(ctx context.Context, id string, epoch uint64, status heartbeat.ClaimStatus, at time.Time) {
	ev, err := heartbeat.BuildPromotion(a.keys, heartbeat.PromotionParams{WorkloadID: id, At: at, Epoch: epoch, Status: status})
	if err != nil {
		a.logger.Error("build promotion claim", "workload", id, "err", err)
		if status == heartbeat.ClaimActive {
			a.send(ctx, input{claimAck: &lease.ClaimAck{Workload: id, Epoch: epoch}})
		}
		return
	}
	pctx, cancel := context.WithTimeout(ctx, a.claimIOTimeout())
	res := a.pool.Publish(pctx, ev)
	cancel()
	if status != heartbeat.ClaimActive {
		return
	}
	a.emit("claim", id, "promotion claim for epoch %d accepted by %d of %d relays", epoch, len(res.Accepted), a.cfg.Lease.N)
	a.send(ctx, input{claimAck: &lease.ClaimAck{Workload: id, Epoch: epoch, Accepted: len(res.Accepted)}})
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
		var tok store.Token
		tracked := re.Event.Kind != heartbeat.KindHeartbeat && re.Event.Kind != heartbeat.KindHeartbeatEphemeral
		if tracked {
			tok = a.cursor.Begin(int64(re.Event.CreatedAt))
		}
		in, ok := a.decode(ctx, now, re)
		if !ok {
			if tracked {
				a.cursor.Done(tok)
			}
			continue
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
// snapshot changed since the last save, and the cursor. Only the changed
// rows are kept in memory (10,000 unchanged workloads cost a marshal each,
// not a copy).
func (a *Agent) saveMeta(ctx context.Context) error {
	snap := a.m.Snapshot()
	var changed []workloadRow
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
			a.saved[w.Spec.ID] = h
		}
	}
	snap.Workloads = nil
	err := sqlitedb.InTx(ctx, a.db, func(tx *sql.Tx) error {
		if err := saveWorkloadRows(ctx, a.st, tx, changed); err != nil {
			return err
		}
		if err := saveMachineMeta(ctx, a.st, tx, snap); err != nil {
			return err
		}
		if _, err := a.st.SaveCursor(ctx, tx, cursorKey, a.cursor.Cursor()); err != nil {
			return fmt.Errorf("save cursor: %w", err)
		}
		return nil
	})
	a.noteWrite(err)
	return err
}

// applyCommands applies operator commands queued in the database.
func (a *Agent) applyCommands(ctx context.Context) {
	cmds, err := ListCommands(ctx, a.db, true)
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
