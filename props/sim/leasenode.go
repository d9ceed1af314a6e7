package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"provideragent/driver"
	"provideragent/driver/drivertest"
	"provideragent/lease"
)

// LeaseHeartbeat is the body of a heartbeat published by a LeaseNode: the
// (workload, epoch) pairs it holds (lease.Machine.Held).
type LeaseHeartbeat struct {
	Workloads []lease.WorkloadEpoch
	// Shard and Shards split one beat over several events (the agent does
	// when the list is too long for one relay event); 0/0 is one event.
	Shard, Shards int
}

// LeaseRevocation is the body of a revocation (kind 38385).
type LeaseRevocation struct {
	Workload  string
	Epoch     uint64
	Successor string
	Standbys  []string
	Reason    string
	QuorumAt  int64 // unix milliseconds, the revoker's clock; 0 unknown
	// StateURI names the checkpoint the successor should resume from (a
	// planned move's final record).
	StateURI string
}

// LeaseClaim is the body of a promotion claim or withdrawn marker (kind
// 38386 under the claim d tag, ClaimD: a Paygress node never reads it).
type LeaseClaim struct {
	Workload string
	Epoch    uint64
	Active   bool
}

// LeaseAnnouncement is the body of the Paygress-form promotion announcement
// a LeaseNode publishes once its claim won (kind 38386 under the Paygress d
// tag, AnnouncementD), with its epoch.
type LeaseAnnouncement struct {
	Workload string
	Epoch    uint64
}

// ClaimD is the d tag of a workload's claims and withdrawn markers (the
// agent's provider-agent:claim:v1:<workload>).
func ClaimD(workload string) string { return "claim:" + workload }

// AnnouncementD is the d tag of a workload's promotion announcements (the
// Paygress paygress:promoted:v1:<workload>); Paygress nodes read every
// event under it as a promotion.
func AnnouncementD(workload string) string { return "promoted:" + workload }

// ProviderKey is the hex pubkey of simulated provider p.
func ProviderKey(p ProviderID) string { return fmt.Sprintf("%064x", int(p)+0xa0) }

// RelayURL is the URL of simulated relay r.
func RelayURL(r RelayID) string { return fmt.Sprintf("wss://r%d.sim", int(r)) }

// LeaseConfig returns lease.DefaultConfig with the simulated relay set of n
// relays and quorum m.
func LeaseConfig(m, n int) lease.Config {
	c := lease.DefaultConfig()
	c.M, c.N = m, n
	c.Relays = make([]string, n)
	for i := range c.Relays {
		c.Relays[i] = RelayURL(RelayID(i))
	}
	return c
}

// LeaseSpec is the grant of workload id to k providers: P0 is the primary at
// epoch 1 and P1..Pk-1 the standbys in rank order (warm standby).
func LeaseSpec(cfg lease.Config, id string, k int) lease.Spec {
	s := lease.Spec{
		ID:            id,
		Primary:       ProviderKey(0),
		Replication:   lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Epoch:         1,
		CreatedAt:     Epoch,
		Relays:        append([]string(nil), cfg.Relays...),
		Quorum:        cfg.M,
	}
	for i := 1; i < k; i++ {
		s.Standbys = append(s.Standbys, ProviderKey(ProviderID(i)))
	}
	return s
}

// outboxEntry is one durable outbound event (revocation, withdrawn marker
// or announcement) and the relays that have not yet accepted it: the
// courier's receipts, kept with the database (they survive a crash).
type outboxEntry struct {
	Ev      Event
	Pending []bool
}

// leaseDisk is what survives an agent crash: the driver's database (a
// drivertest.MemStore: workload rows, the machine's metadata, claim times,
// the subscription cursor), the outbox's receipts, and each durable
// workload's checkpoint file.
type leaseDisk struct {
	store  drivertest.MemStore
	outbox []outboxEntry
	files  map[string]*ckptFile
}

type claimPub struct {
	workload        string
	epoch           uint64
	accepted, total int
	reported        bool
}

type claimRead struct {
	workload  string
	epoch     uint64
	answered  int
	read      int
	claims    []lease.PromotionClaim
	completed bool
}

type timerRead struct {
	workload string
	epoch    uint64
}
type timerRespawn struct {
	workload string
	epoch    uint64
	attempt  int
}
type timerOutbox struct{ gen uint64 }

// OutboxRetry is how often a LeaseNode re-sends outbox events that some
// relay has not accepted yet.
const OutboxRetry = 30 * time.Second

// SaveEvery is how often a LeaseNode saves the machine's metadata (the
// agent's periodic save).
const SaveEvery = 5 * time.Second

// fenceRetry is how often a revocation held back by its workload's stop
// (the agent's fence gate) is looked at again.
const fenceRetry = time.Second

// LeaseNode is one simulated provider's agent around the one driver
// (provideragent/driver) the agent runs: it converts simulated events into
// driver inputs and the driver's effects into simulated actions, and keeps
// nothing of the driver's decisions itself. Like the agent's loop, it
// tracks the grant at first boot, feeds every verified event from every
// relay (its own heartbeats included) as one step and ticks in it, ticks
// every TickInterval, saves every SaveEvery, publishes heartbeats listing
// Held() every HeartbeatInterval, runs the claim-step feedback (the claim's
// acceptances; at ReadClaims.At it reads every relay and hands the driver
// every claim found), and sends the outbox rows the driver committed (a
// revocation only once its workload's stop completed, as the agent's fence
// gate does). Its database is a drivertest.MemStore that survives crashes:
// what a restart restores is exactly what the driver committed. With a
// checkpoint policy in the grant (checkpoint.go, move.go) it also runs the
// copy as a counter that checkpoints every CheckpointEvery, publishes
// records while Live, restores a new epoch's state from the relays, and
// performs planned moves (Sim.Move).
//
// Faults aimed at the driver's seams: ArmCommitFailure (commits refused),
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
	d      *driver.Driver // nil while crashed
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
	nextSave    time.Time

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

// ShardBeats makes the node split every beat over n heartbeat events, the
// held list dealt round-robin (shard 0 may list nothing), as the agent does
// for long lists, so that faults can hit part of a beat.
func (n *LeaseNode) ShardBeats(k int) { n.shards = k }

// ArmCommitFailure makes every commit fail for d from the node's latest
// local time (a full disk), as the driver sees it: the step's stops and
// reports are performed, the rest held; a crash meanwhile restores what was
// committed before; once a commit succeeds the held steps persist.
func (n *LeaseNode) ArmCommitFailure(d time.Duration) bool {
	if n.d == nil || n.halted {
		return false
	}
	n.failUntil = n.now.Add(d)
	return true
}

// ArmCommitStall makes every commit attempt for d wait for the database as
// long as the driver lets it (a write lock held by another process) and
// then fail: the node's loop stalls for that wait, its ticks and inputs
// delayed, as the agent's are.
func (n *LeaseNode) ArmCommitStall(d time.Duration) bool {
	if n.d == nil || n.halted {
		return false
	}
	n.stallUntil = n.now.Add(d)
	return true
}

// ArmMidStepCrash makes the agent crash at its next commit that writes a
// workload row, after the commit and before the step's deferred effects
// (starts, claim-step requests; the outbox rows are committed, not sent);
// it restarts after down. The workload process is left as it was.
func (n *LeaseNode) ArmMidStepCrash(down time.Duration) {
	n.crashArmed, n.crashBefore, n.crashDown = true, false, down
}

// ArmCrashBeforeCommit makes the agent crash at its next commit that would
// write a workload row, after the step's stops were performed and before
// anything is committed; it restarts after down.
func (n *LeaseNode) ArmCrashBeforeCommit(down time.Duration) {
	n.crashArmed, n.crashBefore, n.crashDown = true, true, down
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

// Machine returns the node's machine (nil while crashed), for reading.
func (n *LeaseNode) Machine() *lease.Machine {
	if n.d == nil {
		return nil
	}
	return n.d.Machine()
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
	n.nextSave = now.Add(SaveEvery)
	n.now = maxTime(n.now, now)
	d, err := driver.Open(context.Background(), now, driver.Config{}, n.cfg, n.key, driver.Deps{
		Store: &n.disk.store, Outbox: simOutbox{n}, Performer: simPerformer{n}, Events: simEvents{n},
	})
	if err != nil {
		n.fail(fmt.Errorf("open driver: %w", err))
		return
	}
	n.d = d
	n.armCheckpoints(now)
	n.checkRestored()
	n.checkMoveLost()
	if !d.Restored() {
		s := d.Begin(now)
		if err := s.Grant(n.spec); err != nil {
			n.fail(fmt.Errorf("track: %w", err))
			return
		}
		n.commit(s)
		return
	}
	env.Logf("restored from the database: %s", n.Describe())
	n.reissuing = true
	n.commitRestored(now)
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

func (n *LeaseNode) commitRestored(now time.Time) {
	if err := n.d.CommitRestored(context.Background(), now); err != nil && !errors.Is(err, driver.ErrUnpersisted) {
		n.env.Logf("commit: %v", err)
	}
}

// commit commits a step; a failure is the driver's to hold and retry.
func (n *LeaseNode) commit(s *driver.Step) {
	_ = s.Commit(context.Background())
}

// Crash implements Node: the driver and everything in memory are lost;
// the database (what the driver committed) and the outbox's receipts
// survive.
func (n *LeaseNode) Crash() {
	n.d, n.pubs, n.reads = nil, nil, nil
	n.copies, n.restores, n.moves = nil, nil, nil
	n.failUntil, n.stallUntil, n.crashArmed = time.Time{}, time.Time{}, false
}

// refuse is the database's answer to a commit attempt (the armed faults).
func (n *LeaseNode) refuse(b *driver.Batch, wait time.Duration) error {
	if n.crashArmed && n.crashBefore && n.crashAt(b) {
		n.crashArmed = false
		n.env.Logf("agent crashes after the step's stops, before its commit")
		n.halt()
		return errors.New("agent crashed")
	}
	if n.now.Before(n.stallUntil) {
		n.env.Stall(wait)
		return fmt.Errorf("database is locked (waited %v)", wait)
	}
	if n.now.Before(n.failUntil) {
		return errors.New("disk full")
	}
	return nil
}

// wrote is called once a commit wrote b: its outbox rows become receipts,
// sent now (a revocation once its workload's stop completed).
func (n *LeaseNode) wrote(b *driver.Batch) {
	for _, r := range b.Outbox {
		ev := r.Payload.(Event)
		e := outboxEntry{Ev: ev, Pending: make([]bool, n.env.NumRelays())}
		for i := range e.Pending {
			e.Pending[i] = true
		}
		n.disk.outbox = append(n.disk.outbox, e)
	}
	if n.crashArmed && !n.crashBefore && n.crashAt(b) {
		n.crashArmed = false
		n.env.Logf("agent crashes after the commit, before the step's deferred effects")
		n.halt()
		return
	}
	if len(b.Outbox) > 0 {
		n.flushOutbox()
	}
}

// crashAt reports whether an armed crash strikes at the commit of b: one
// that writes a workload row (crashIf accepts).
func (n *LeaseNode) crashAt(b *driver.Batch) bool {
	for _, w := range b.Workloads {
		if n.crashIf == nil || n.crashIf(w) {
			return true
		}
	}
	return false
}

// halt stops the node handling anything and crashes its agent right after
// the current callback.
func (n *LeaseNode) halt() {
	n.halted = true
	n.env.CrashAgent(n.crashDown)
}

// Live implements Node: whether the machine holds w in state Live.
func (n *LeaseNode) Live(w string) (uint64, bool) {
	if n.d == nil {
		return 0, false
	}
	st, epoch, _, ok := n.d.Machine().Epochs(w)
	if !ok || st != lease.StateLive {
		return 0, false
	}
	return epoch, true
}

// Holding implements Holder: the epoch the machine holds w at (a Holding
// state), or the one it claims (Promoting).
func (n *LeaseNode) Holding(w string) (uint64, bool, bool) {
	if n.d == nil {
		return 0, false, false
	}
	st, epoch, target, ok := n.d.Machine().Epochs(w)
	switch {
	case !ok:
		return 0, false, false
	case st == lease.StatePromoting:
		return target, true, true
	case st.Holding():
		return epoch, false, true
	}
	return 0, false, false
}

// Claiming reports whether the machine is in the claim step for w
// (Promoting), for fault schedules aimed at claim rounds.
func (n *LeaseNode) Claiming(w string) bool {
	if n.d == nil {
		return false
	}
	st, ok := n.d.Machine().State(w)
	return ok && st == lease.StatePromoting
}

// Describe implements Node.
func (n *LeaseNode) Describe() string {
	if n.d == nil {
		return "down"
	}
	w, ok := n.d.Machine().Workload(n.spec.ID)
	if !ok {
		return "untracked"
	}
	s := fmt.Sprintf("%s@%d", w.State, w.Epoch)
	if w.State == lease.StatePromoting {
		s += fmt.Sprintf("(%s->%d)", w.Phase, w.Target)
	}
	return s
}

// Tick implements Node: a heartbeat when one is due, the save when due,
// and a step that ticks (a held step is retried by it when due).
func (n *LeaseNode) Tick(env Env, now time.Time) {
	if !n.enter(env, now) {
		return
	}
	if !now.Before(n.nextHB) {
		// A ticker: keep the cadence; after a stall, restart it from now.
		n.nextHB = n.nextHB.Add(n.cfg.HeartbeatInterval)
		if !n.nextHB.After(now) {
			n.nextHB = now.Add(n.cfg.HeartbeatInterval)
		}
		n.beat(now)
	}
	s := n.d.Begin(now)
	s.Tick()
	n.commit(s)
	if n.d != nil && !n.halted && !now.Before(n.nextSave) {
		n.nextSave = now.Add(SaveEvery)
		_ = n.d.Save(context.Background(), now, n.disk.store.Cursor)
	}
}

// beat publishes a heartbeat listing Held().
func (n *LeaseNode) beat(now time.Time) {
	held := n.marked(n.d.Machine().Held(nil))
	env := n.env
	if n.shards <= 1 {
		env.Publish(Event{Kind: KindHeartbeat, CreatedAt: now.Unix(), D: fmt.Sprint(now.Unix() / 60), Body: LeaseHeartbeat{Workloads: held}}, nil)
		return
	}
	parts := make([][]lease.WorkloadEpoch, n.shards)
	for i, we := range held {
		// the last shard first, so that shard 0 (the Paygress-form event)
		// can be a presence-only one
		j := n.shards - 1 - i%n.shards
		parts[j] = append(parts[j], we)
	}
	for i, part := range parts {
		env.Publish(Event{Kind: KindHeartbeat, CreatedAt: now.Unix(), D: fmt.Sprintf("%d:%d", now.Unix()/60, i),
			Body: LeaseHeartbeat{Workloads: part, Shard: i, Shards: n.shards}}, nil)
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
	s := n.d.Begin(now)
	switch b := ev.Body.(type) {
	case LeaseHeartbeat:
		s.Heartbeat(lease.Heartbeat{
			Provider:  author,
			Relay:     RelayURL(r),
			EventID:   fmt.Sprintf("%016x", uint64(ev.ID)),
			CreatedAt: time.Unix(ev.CreatedAt, 0),
			Listed:    true,
			Workloads: b.Workloads,
			Shard:     b.Shard,
			Shards:    b.Shards,
		})
	case AnchorHeartbeat:
		// A Paygress v1 peer: its heartbeat lists no workloads.
		s.Heartbeat(lease.Heartbeat{
			Provider:  author,
			Relay:     RelayURL(r),
			EventID:   fmt.Sprintf("%016x", uint64(ev.ID)),
			CreatedAt: time.Unix(ev.CreatedAt, 0),
		})
	case AnchorPromotion, LeaseClaim, LeaseAnnouncement:
		c, _ := claimInput(r, ev)
		s.Claim(c)
	case LeaseRevocation:
		s.Revocation(lease.Revocation{
			Workload: b.Workload, Signer: author, Epoch: b.Epoch,
			Successor: b.Successor, Standbys: b.Standbys, Reason: b.Reason, CreatedAt: time.Unix(ev.CreatedAt, 0),
			QuorumAt: unixMilliOrZero(b.QuorumAt), StateURI: b.StateURI,
		})
	default:
		return
	}
	s.Tick()
	n.commit(s)
}

// claimInput is the lease input for a kind 38386 event as relay r served
// it, as the agent feeds it (heartbeat.ClaimInput): our claims and withdrawn
// markers with their epoch, a Paygress announcement with EpochUnknown and
// its created_at, left to lease.Machine.ObserveClaim to judge.
func claimInput(r RelayID, ev *Event) (lease.PromotionClaim, bool) {
	c := lease.PromotionClaim{Claimer: ProviderKey(ev.Author), Relay: RelayURL(r), CreatedAt: time.Unix(ev.CreatedAt, 0)}
	switch b := ev.Body.(type) {
	case LeaseClaim:
		c.Workload, c.Epoch, c.Active = b.Workload, b.Epoch, b.Active
	case LeaseAnnouncement:
		c.Workload, c.Epoch, c.Active = b.Workload, b.Epoch, true
	case AnchorPromotion:
		c.Workload, c.Epoch, c.Active = b.Workload, lease.EpochUnknown, true
	default:
		return c, false
	}
	return c, true
}

// Connected implements Node: the relay's stream is new, so what came
// before it may be missing (RelayGap) until its EOSE.
func (n *LeaseNode) Connected(env Env, now time.Time, r RelayID) {
	if !n.enter(env, now) {
		return
	}
	s := n.d.Begin(now)
	s.RelayGap(RelayURL(r))
	n.commit(s)
}

// EOSE implements Node.
func (n *LeaseNode) EOSE(env Env, now time.Time, r RelayID) {
	if !n.enter(env, now) {
		return
	}
	s := n.d.Begin(now)
	s.RelaySynced(RelayURL(r))
	s.Tick()
	n.commit(s)
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
	p := n.pubs[id]
	if p == nil || p.reported {
		return
	}
	p.total++
	if ok {
		p.accepted++
	}
	if p.accepted >= n.cfg.M || p.total >= env.NumRelays() {
		p.reported = true
		delete(n.pubs, id)
		env.Logf("claim for epoch %d accepted by %d relays", p.epoch, p.accepted)
		s := n.d.Begin(now)
		s.ClaimPublished(lease.ClaimAck{Workload: p.workload, Epoch: p.epoch, Accepted: p.accepted})
		n.commit(s)
	}
}

// QueryResult implements Node: the claim read's answers; once every relay
// answered, the claims found and the count of relays read go to the driver
// in one step. A restore read's answers go to restoreAnswer.
func (n *LeaseNode) QueryResult(env Env, now time.Time, r RelayID, q QueryID, evs []*Event, ok bool) {
	if !n.enter(env, now) {
		return
	}
	if rr := n.restores[q]; rr != nil {
		delete(n.restores, q)
		n.restoreAnswer(now, r, rr, evs, ok)
		return
	}
	rd := n.reads[q]
	if rd == nil || rd.completed {
		return
	}
	delete(n.reads, q)
	rd.answered++
	if ok {
		rd.read++
		for _, ev := range evs {
			c, isClaim := claimInput(r, ev)
			if !isClaim || c.Workload != rd.workload || !n.admit(now, ev) {
				continue // the agent's claim read ingests every event it reads
			}
			rd.claims = append(rd.claims, c)
		}
	}
	if rd.answered < env.NumRelays() {
		return
	}
	rd.completed = true
	s := n.d.Begin(now)
	read := lease.ClaimRead{Workload: rd.workload, Epoch: rd.epoch, Relays: rd.read}
	env.Logf("read claims for epoch %d: %d relays read, %d competing", rd.epoch, rd.read, competing(n.key, read, rd.claims))
	s.ClaimsRead(read, rd.claims)
	n.commit(s)
}

// competing counts the other providers with an active claim at or above
// the epoch read, as the driver does (for the timeline).
func competing(self string, r lease.ClaimRead, claims []lease.PromotionClaim) int {
	rivals := map[string]bool{}
	for _, c := range claims {
		if c.Workload == r.Workload && c.Claimer != self && c.Active && c.Epoch >= r.Epoch {
			rivals[c.Claimer] = true
		}
	}
	return len(rivals)
}

// Timer implements Node.
func (n *LeaseNode) Timer(env Env, now time.Time, tag any) {
	if !n.enter(env, now) {
		return
	}
	switch t := tag.(type) {
	case timerRead:
		rd := &claimRead{workload: t.workload, epoch: t.epoch}
		for r := 0; r < env.NumRelays(); r++ {
			q := env.Query(RelayID(r), func(ev *Event) bool {
				c, ok := claimInput(RelayID(r), ev)
				return ok && ev.Kind == KindClaim && c.Workload == t.workload
			})
			n.reads[q] = rd
		}
	case timerRespawn:
		// The restart happened with the effect; this is its report.
		s := n.d.Begin(now)
		s.RespawnDone(lease.RespawnResult{Workload: t.workload, Attempt: t.attempt, OK: true})
		n.commit(s)
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
	s := n.d.Begin(now)
	s.Exited(lease.ProcessExit{Workload: w, Epoch: epoch, Reason: "exit status 1"})
	n.commit(s)
}

func (n *LeaseNode) pruneOutbox() {
	out := n.disk.outbox[:0]
	for _, e := range n.disk.outbox {
		for _, p := range e.Pending {
			if p {
				out = append(out, e)
				break
			}
		}
	}
	n.disk.outbox = out
}

// flushOutbox re-sends every outbox event to the relays that have not
// accepted it yet (the same event, as courier/ does). A revocation waits
// while its workload still runs here (its stop not completed): the agent's
// fence gate (rule 7).
func (n *LeaseNode) flushOutbox() {
	gated := false
	for _, e := range n.disk.outbox {
		if rev, ok := e.Ev.Body.(LeaseRevocation); ok {
			if _, running := n.env.Running(rev.Workload); running {
				gated = true
				continue
			}
		}
		var to []RelayID
		for r, p := range e.Pending {
			if p {
				to = append(to, RelayID(r))
			}
		}
		if len(to) > 0 {
			n.env.Republish(e.Ev, to)
		}
	}
	// One retry timer: soon while a revocation waits for its stop, else
	// while any event waits for a relay.
	switch {
	case gated:
		n.flushGen++
		n.env.At(n.now.Add(fenceRetry), timerOutbox{gen: n.flushGen})
	case len(n.disk.outbox) > 0:
		n.flushGen++
		n.env.At(n.now.Add(OutboxRetry), timerOutbox{gen: n.flushGen})
	}
}

// simOutbox is the node's driver.Outbox: simulated events, created at the
// job's time (whole seconds), as the agent signs them.
type simOutbox struct{ n *LeaseNode }

func (o simOutbox) Build(jobs []driver.OutboxJob) []driver.OutboxResult {
	out := make([]driver.OutboxResult, len(jobs))
	for i, j := range jobs {
		ev := o.n.outboxEvent(j.At, j.Effect)
		ev.ID, ev.Author = o.n.env.NewEventID(), o.n.self
		out[i].Row = driver.OutboxRow{Key: fmt.Sprintf("%T:%s:%d:%d", j.Effect, j.Effect.Workload(), ev.CreatedAt, ev.ID), Payload: ev}
	}
	return out
}

// outboxEvent is the event an Outbox effect (lease.DurabilityOf) puts in
// the durable outbox, built as the agent builds it.
func (n *LeaseNode) outboxEvent(at time.Time, e lease.Effect) Event {
	switch e := e.(type) {
	case lease.PublishRevocation:
		var q int64
		if !e.QuorumAt.IsZero() {
			q = e.QuorumAt.UnixMilli() // whole milliseconds, rounded down, as on the wire
		}
		return Event{Kind: KindRevocation, CreatedAt: at.Unix(), D: e.ID, Body: LeaseRevocation{
			Workload: e.ID, Epoch: e.Epoch, Successor: e.Successor, Standbys: e.Standbys, Reason: e.Reason, QuorumAt: q,
			StateURI: e.StateURI,
		}}
	case lease.WithdrawClaim:
		return Event{Kind: KindClaim, CreatedAt: at.Unix(), D: ClaimD(e.ID), Body: LeaseClaim{
			Workload: e.ID, Epoch: e.Epoch, Active: false,
		}}
	case lease.AnnouncePromotion:
		return Event{Kind: KindClaim, CreatedAt: at.Unix(), D: AnnouncementD(e.ID), Body: LeaseAnnouncement{
			Workload: e.ID, Epoch: e.Epoch,
		}}
	}
	panic(fmt.Sprintf("sim: %T is not an outbox effect", e)) // lease.DurabilityOf and this switch disagree
}

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
func (simEvents) Saved(int)   {}
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
	p.n.startCopy(e.ID, e.Epoch)
}

// Stop stops the process; a durable copy writes its final checkpoint first
// (SIGTERM), which is published only while the machine holds it Live.
func (p performer) Stop(e lease.StopWorkload) {
	p.n.stopCopy(e.ID)
	p.env.Stop(e.ID)
	p.env.Logf("  stop reason: %s", e.Reason)
}

// Respawn restarts at once (lease emits it only when due); RespawnDone
// follows as the next input.
func (p performer) Respawn(e lease.AttemptRespawn) {
	p.checkPersisted(e.ID, e.Epoch, "respawn")
	p.env.Logf("respawn attempt %d", e.Attempt)
	p.n.startCopy(e.ID, e.Epoch)
	p.env.At(p.now, timerRespawn{workload: e.ID, epoch: e.Epoch, attempt: e.Attempt})
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

var _ Node = (*LeaseNode)(nil)

// unixMilliOrZero is the time of unix milliseconds u, or the zero time for 0.
func unixMilliOrZero(u int64) time.Time {
	if u == 0 {
		return time.Time{}
	}
	return time.UnixMilli(u)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
