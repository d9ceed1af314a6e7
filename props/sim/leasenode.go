package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"provideragent/heartbeat"
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

// outboxEntry is one durable outbound event (revocation or withdrawn
// marker) and the relays that have not yet accepted it. It is persisted with
// the machine and retried until every relay accepted it, like courier/.
type outboxEntry struct {
	Ev      Event
	Pending []bool
}

// leaseDisk is what survives a crash: the machine snapshot (as JSON, the
// form the agent stores) and the outbox.
type leaseDisk struct {
	Snapshot []byte
	Outbox   []outboxEntry
	Created  map[string]int64 // last created_at per d tag (replaceable events)
	Cursor   int64            // subscription cursor (see LeaseNode.Since)
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
	claimers  map[ProviderID]bool
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
type timerOutbox struct{}

// OutboxRetry is how often a LeaseNode re-sends outbox events that some
// relay has not accepted yet.
const OutboxRetry = 30 * time.Second

// LeaseNode drives one lease.Machine exactly as lease/doc.go tells a driver
// to (the agent's loop, minus sockets and SQL): it tracks the grant at first
// boot, feeds every verified event from every relay (its own heartbeats
// included), ticks every TickInterval and after every observation, publishes
// heartbeats listing Held() every HeartbeatInterval, performs effects in
// order after persisting, runs the claim-step feedback loop (ClaimPublished
// once M relays said OK true or all answered or timed out; at ReadClaims.At
// it reads every relay, feeds each claim to ObserveClaim and reports
// ClaimsRead when every relay answered), sends revocations and withdrawn
// markers through a durable outbox, restarts a process at once on
// AttemptRespawn, and after a crash restores the snapshot, performs
// Restore's effects (stops for workloads not held), re-issues Outstanding()
// and reports RelaySynced on each EOSE.
type LeaseNode struct {
	cfg  lease.Config
	spec lease.Spec
	self ProviderID
	key  string
	keys map[string]ProviderID

	m       *lease.Machine
	disk    *leaseDisk
	outbox  []outboxEntry
	created map[string]int64
	nextHB  time.Time
	pubs    map[EventID]*claimPub
	reads   map[QueryID]*claimRead
	err     error
	heldBuf []lease.WorkloadEpoch

	// midStep arms a crash between persisting a step and performing its
	// effects; halted drops every input until the simulator crashes us.
	midStep *time.Duration
	halted  bool
	// reissuing is set while Boot re-issues Outstanding() (not a new
	// decision of the machine: no TakeoverClaim report).
	reissuing bool
	// shards splits every beat over this many events (0 or 1: one).
	shards int
	// Failed commits (ArmCommitFailure): until failUntil (local) no step
	// persists; failDisk is what a crash meanwhile restores (the state when
	// the failure began) and held the effects of the steps held back.
	failUntil time.Time
	failDisk  *leaseDisk
	held      []lease.Effect
	// cursor is the newest created_at of a claim or revocation that passed
	// the checks the agent's ingest makes (signature, a key the lease
	// names, not from the future): the subscription cursor. Persisted.
	cursor int64
	now    time.Time // the latest local time seen (for Since)
}

// ShardBeats makes the node split every beat over n heartbeat events, the
// held list dealt round-robin (shard 0 may list nothing), as the agent does
// for long lists, so that faults can hit part of a beat.
func (n *LeaseNode) ShardBeats(k int) { n.shards = k }

// ArmCommitFailure makes every step's commit fail for d from the node's
// latest local time (a full disk, a
// write lock held elsewhere), as the agent's driver sees it: the step's
// stops and reports are performed at once (lease.BeforeCommit), the rest is
// held, a crash meanwhile restores the state from before the failure, and
// once a commit succeeds again (the agent retries every second) the held
// steps persist and lease.Machine.AfterHeld says what to perform.
func (n *LeaseNode) ArmCommitFailure(d time.Duration) bool {
	if n.m == nil || n.halted {
		return false
	}
	if n.failDisk == nil {
		n.failDisk = n.snapshotDisk()
	}
	n.failUntil = n.now.Add(d)
	return true
}

// ArmMidStepCrash makes the agent crash at its next step that has effects,
// after persisting the new state and the step's outbox rows (revocations,
// withdrawn markers) and before performing any effect; it restarts after
// down. The workload process is left as it was.
func (n *LeaseNode) ArmMidStepCrash(down time.Duration) { n.midStep = &down }

// NewLeaseNode returns provider self's driver for spec under cfg.
func NewLeaseNode(cfg lease.Config, spec lease.Spec, self ProviderID, providers int) *LeaseNode {
	n := &LeaseNode{cfg: cfg, spec: spec, self: self, key: ProviderKey(self), keys: map[string]ProviderID{}}
	for i := 0; i < providers; i++ {
		n.keys[ProviderKey(ProviderID(i))] = ProviderID(i)
	}
	return n
}

// Machine returns the node's machine (nil while crashed).
func (n *LeaseNode) Machine() *lease.Machine { return n.m }

// Err returns the first driver error (a machine call that failed).
func (n *LeaseNode) Err() error { return n.err }

func (n *LeaseNode) fail(env Env, err error) {
	if n.err == nil {
		n.err = err
		env.Logf("DRIVER ERROR: %v", err)
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

// Boot implements Node.
func (n *LeaseNode) Boot(env Env, now time.Time) {
	n.halted = false
	n.pubs = map[EventID]*claimPub{}
	n.reads = map[QueryID]*claimRead{}
	n.nextHB = now
	if n.disk == nil {
		m, err := lease.New(n.cfg, n.key)
		if err != nil {
			n.fail(env, fmt.Errorf("new machine: %w", err))
			return
		}
		n.m = m
		n.created = map[string]int64{}
		effs, err := m.Track(now, n.spec)
		if err != nil {
			n.fail(env, fmt.Errorf("track: %w", err))
			return
		}
		n.apply(env, now, effs)
		return
	}
	var snap lease.Snapshot
	if err := json.Unmarshal(n.disk.Snapshot, &snap); err != nil {
		n.fail(env, fmt.Errorf("decode snapshot: %w", err))
		return
	}
	m, effs, err := lease.Restore(now, n.cfg, snap)
	if err != nil {
		n.fail(env, fmt.Errorf("restore: %w", err))
		return
	}
	n.m = m
	n.outbox = n.disk.Outbox
	n.created = n.disk.Created
	n.cursor = n.disk.Cursor
	n.disk = nil
	env.Logf("restored from snapshot: %s", n.Describe())
	n.apply(env, now, effs)
	n.reissuing = true
	n.apply(env, now, m.Outstanding())
	n.reissuing = false
	n.flushOutbox(env)
}

// Crash implements Node: the machine state and outbox persisted after the
// last input survive (the driver persists after every input, and the
// simulator crashes providers between inputs, or, after ArmMidStepCrash,
// between persisting a step and performing its effects), the rest is lost;
// while commits fail (ArmCommitFailure), what survives is the state from
// before the failure.
func (n *LeaseNode) Crash() {
	if n.m == nil {
		return
	}
	if n.failDisk != nil {
		n.disk = n.failDisk
	} else {
		n.disk = n.snapshotDisk()
	}
	n.failDisk, n.failUntil, n.held = nil, time.Time{}, nil
	n.m, n.outbox, n.pubs, n.reads = nil, nil, nil, nil
}

// snapshotDisk is what the driver has persisted now.
func (n *LeaseNode) snapshotDisk() *leaseDisk {
	b, err := json.Marshal(n.m.Snapshot())
	if err != nil {
		panic(fmt.Sprintf("lease snapshot does not marshal: %v", err)) // a lease bug, not an input
	}
	created := make(map[string]int64, len(n.created))
	for k, v := range n.created {
		created[k] = v
	}
	return &leaseDisk{Snapshot: b, Outbox: append([]outboxEntry(nil), n.outbox...), Created: created, Cursor: n.cursor}
}

// Live implements Node: whether the machine holds w in state Live.
func (n *LeaseNode) Live(w string) (uint64, bool) {
	if n.m == nil {
		return 0, false
	}
	if st, ok := n.m.State(w); !ok || st != lease.StateLive {
		return 0, false
	}
	n.heldBuf = n.m.Held(n.heldBuf[:0])
	for _, we := range n.heldBuf {
		if we.ID == w {
			return we.Epoch, true
		}
	}
	return 0, false
}

// Holding implements Holder: the epoch the machine holds w at (a Holding
// state), or the one it claims (Promoting).
func (n *LeaseNode) Holding(w string) (uint64, bool, bool) {
	if n.m == nil {
		return 0, false, false
	}
	ws, ok := n.m.Workload(w)
	switch {
	case !ok:
		return 0, false, false
	case ws.State == lease.StatePromoting:
		return ws.Target, true, true
	case ws.State.Holding():
		return ws.Epoch, false, true
	}
	return 0, false, false
}

// Claiming reports whether the machine is in the claim step for w
// (Promoting), for fault schedules aimed at claim rounds.
func (n *LeaseNode) Claiming(w string) bool {
	if n.m == nil {
		return false
	}
	st, ok := n.m.State(w)
	return ok && st == lease.StatePromoting
}

// Describe implements Node.
func (n *LeaseNode) Describe() string {
	if n.m == nil {
		return "down"
	}
	w, ok := n.m.Workload(n.spec.ID)
	if !ok {
		return "untracked"
	}
	s := fmt.Sprintf("%s@%d", w.State, w.Epoch)
	if w.State == lease.StatePromoting {
		s += fmt.Sprintf("(%s->%d)", w.Phase, w.Target)
	}
	return s
}

// createdAt returns a created_at for an event with d tag d: now, but
// strictly after the last one with the same d tag, so that a replacement
// (a withdrawn marker after its claim) always wins NIP-01's tie-break.
func (n *LeaseNode) createdAt(d string, now time.Time) int64 {
	c := heartbeat.NextCreatedAt(n.created[d], now)
	n.created[d] = c
	return c
}

// Tick implements Node.
func (n *LeaseNode) Tick(env Env, now time.Time) {
	if n.m == nil || n.halted {
		return
	}
	n.now = maxTime(n.now, now)
	if !now.Before(n.nextHB) {
		// A ticker: keep the cadence; after a stall, restart it from now.
		n.nextHB = n.nextHB.Add(n.cfg.HeartbeatInterval)
		if !n.nextHB.After(now) {
			n.nextHB = now.Add(n.cfg.HeartbeatInterval)
		}
		held := n.m.Held(nil)
		if n.shards <= 1 {
			env.Publish(Event{Kind: KindHeartbeat, CreatedAt: now.Unix(), D: fmt.Sprint(now.Unix() / 60), Body: LeaseHeartbeat{Workloads: held}}, nil)
		} else {
			parts := make([][]lease.WorkloadEpoch, n.shards)
			for i, we := range held {
				// the last shard first, so that shard 0 (the Paygress-form
				// event) can be a presence-only one
				j := n.shards - 1 - i%n.shards
				parts[j] = append(parts[j], we)
			}
			for i, part := range parts {
				env.Publish(Event{Kind: KindHeartbeat, CreatedAt: now.Unix(), D: fmt.Sprintf("%d:%d", now.Unix()/60, i),
					Body: LeaseHeartbeat{Workloads: part, Shard: i, Shards: n.shards}}, nil)
			}
		}
	}
	// Every tick is a step (a held commit is retried even without effects).
	n.apply(env, now, n.m.Tick(now))
}

// Since implements Node: the cursor less the margin the agent allows for
// signers' clock offsets and relay delay, never past now (the agent's
// agent.since).
func (n *LeaseNode) Since() int64 {
	c := min(n.cursor, n.now.Unix())
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

// Receive implements Node.
func (n *LeaseNode) Receive(env Env, now time.Time, r RelayID, ev *Event) {
	if n.m == nil || n.halted {
		return
	}
	n.now = maxTime(n.now, now)
	if ev.Forged {
		return
	}
	if ev.Kind != KindHeartbeat {
		if !n.admit(now, ev) {
			return
		}
		n.cursor = max(n.cursor, ev.CreatedAt)
	}
	author := ProviderKey(ev.Author)
	switch b := ev.Body.(type) {
	case LeaseHeartbeat:
		n.apply(env, now, n.m.ObserveHeartbeat(now, lease.Heartbeat{
			Provider:  author,
			Relay:     RelayURL(r),
			EventID:   fmt.Sprintf("%016x", uint64(ev.ID)),
			CreatedAt: time.Unix(ev.CreatedAt, 0),
			Listed:    true,
			Workloads: b.Workloads,
			Shard:     b.Shard,
			Shards:    b.Shards,
		}))
	case AnchorHeartbeat:
		// A Paygress v1 peer: its heartbeat lists no workloads.
		n.apply(env, now, n.m.ObserveHeartbeat(now, lease.Heartbeat{
			Provider:  author,
			Relay:     RelayURL(r),
			EventID:   fmt.Sprintf("%016x", uint64(ev.ID)),
			CreatedAt: time.Unix(ev.CreatedAt, 0),
		}))
	case AnchorPromotion, LeaseClaim, LeaseAnnouncement:
		c, _ := claimInput(r, ev)
		n.apply(env, now, n.m.ObserveClaim(now, c))
	case LeaseRevocation:
		n.apply(env, now, n.m.ObserveRevocation(now, lease.Revocation{
			Workload: b.Workload, Signer: author, Epoch: b.Epoch,
			Successor: b.Successor, Standbys: b.Standbys, Reason: b.Reason, CreatedAt: time.Unix(ev.CreatedAt, 0),
			QuorumAt: unixMilliOrZero(b.QuorumAt),
		}))
	default:
		return
	}
	n.apply(env, now, n.m.Tick(now))
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

// EOSE implements Node.
func (n *LeaseNode) EOSE(env Env, now time.Time, r RelayID) {
	if n.m == nil || n.halted {
		return
	}
	n.apply(env, now, n.m.RelaySynced(now, RelayURL(r)))
	n.apply(env, now, n.m.Tick(now))
	n.flushOutbox(env)
}

// PublishResult implements Node.
func (n *LeaseNode) PublishResult(env Env, now time.Time, r RelayID, id EventID, ok bool) {
	if n.m == nil || n.halted {
		return
	}
	if ok {
		for i := range n.outbox {
			if n.outbox[i].Ev.ID == id {
				n.outbox[i].Pending[r] = false
			}
		}
		n.pruneOutbox()
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
		n.apply(env, now, n.m.ClaimPublished(now, lease.ClaimAck{Workload: p.workload, Epoch: p.epoch, Accepted: p.accepted}))
	}
}

// QueryResult implements Node.
func (n *LeaseNode) QueryResult(env Env, now time.Time, r RelayID, q QueryID, evs []*Event, ok bool) {
	if n.m == nil || n.halted {
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
			n.apply(env, now, n.m.ObserveClaim(now, c))
			// Competing counts epoch claims; lease records a Paygress
			// announcement that competes as a rival (ClaimsRead sees it).
			if c.Active && c.Epoch >= rd.epoch && ev.Author != n.self {
				rd.claimers[ev.Author] = true
			}
		}
	}
	if rd.answered < env.NumRelays() {
		return
	}
	rd.completed = true
	env.Logf("read claims for epoch %d: %d relays read, %d competing", rd.epoch, rd.read, len(rd.claimers))
	n.apply(env, now, n.m.ClaimsRead(now, lease.ClaimRead{
		Workload: rd.workload, Epoch: rd.epoch, Relays: rd.read, Competing: len(rd.claimers),
	}))
}

// Timer implements Node.
func (n *LeaseNode) Timer(env Env, now time.Time, tag any) {
	if n.m == nil || n.halted {
		return
	}
	switch t := tag.(type) {
	case timerRead:
		rd := &claimRead{workload: t.workload, epoch: t.epoch, claimers: map[ProviderID]bool{}}
		for r := 0; r < env.NumRelays(); r++ {
			q := env.Query(RelayID(r), func(ev *Event) bool {
				c, ok := claimInput(RelayID(r), ev)
				return ok && ev.Kind == KindClaim && c.Workload == t.workload
			})
			n.reads[q] = rd
		}
	case timerRespawn:
		// The restart happened with the effect; this is its report.
		n.apply(env, now, n.m.RespawnDone(now, lease.RespawnResult{Workload: t.workload, Attempt: t.attempt, OK: true}))
	case timerOutbox:
		n.flushOutbox(env)
		if len(n.outbox) > 0 {
			env.At(now.Add(OutboxRetry), timerOutbox{})
		}
	}
}

// Exited implements Node: ProcessExited.
func (n *LeaseNode) Exited(env Env, now time.Time, w string, epoch uint64) {
	if n.m == nil || n.halted {
		return
	}
	n.apply(env, now, n.m.ProcessExited(now, lease.ProcessExit{Workload: w, Epoch: epoch, Reason: "exit status 1"}))
}

func (n *LeaseNode) pruneOutbox() {
	out := n.outbox[:0]
	for _, e := range n.outbox {
		for _, p := range e.Pending {
			if p {
				out = append(out, e)
				break
			}
		}
	}
	n.outbox = out
}

// flushOutbox re-sends every outbox event to the relays that have not
// accepted it yet (the same signed event, as courier/ does).
func (n *LeaseNode) flushOutbox(env Env) {
	for _, e := range n.outbox {
		var to []RelayID
		for r, p := range e.Pending {
			if p {
				to = append(to, RelayID(r))
			}
		}
		if len(to) > 0 {
			env.Republish(e.Ev, to)
		}
	}
}

// outboxRow is a persisted outbox row for ev, not yet sent anywhere (the
// event gets its ID now, as a signed event does when it is built).
func (n *LeaseNode) outboxRow(env Env, ev Event) outboxEntry {
	ev.ID, ev.Author = env.NewEventID(), n.self
	e := outboxEntry{Ev: ev, Pending: make([]bool, env.NumRelays())}
	for i := range e.Pending {
		e.Pending[i] = true
	}
	return e
}

func (n *LeaseNode) enqueue(env Env, now time.Time, ev Event) {
	e := n.outboxRow(env, ev)
	env.Republish(e.Ev, nil)
	if len(n.outbox) == 0 {
		env.At(now.Add(OutboxRetry), timerOutbox{})
	}
	n.outbox = append(n.outbox, e)
}

// apply is the agent's step commit (agent/commit.go commitStep): the stops
// and reports first (lease.BeforeCommit), then "persist" (see Crash), then
// the rest (lease.AfterCommit); while commits fail, the rest is held.
func (n *LeaseNode) apply(env Env, now time.Time, effs []lease.Effect) {
	if n.halted {
		return
	}
	var early []lease.Effect
	for _, e := range effs {
		if lease.BeforeCommit(e) {
			early = append(early, e)
		}
	}
	n.perform(env, now, early)
	if n.failDisk != nil {
		if now.Before(n.failUntil) {
			n.held = append(n.held, effs...)
			return
		}
		n.recover(env, now, effs)
		return
	}
	late := lease.AfterCommit(effs)
	if n.midStep != nil && len(late) > 0 {
		// The transaction committed (state and outbox rows), then the
		// process died before performing anything after it.
		for _, e := range late {
			if lease.DurabilityOf(e) == lease.Outbox {
				n.outbox = append(n.outbox, n.outboxRow(env, n.outboxEvent(now, e)))
			}
		}
		env.Logf("agent crashes after persisting, before performing: %s", describeEffects(late))
		n.halted = true
		env.CrashAgent(*n.midStep)
		n.midStep = nil
		return
	}
	n.perform(env, now, late)
}

// recover is the first commit that succeeds after commits failed: the held
// steps persist with this one, and what they still ask is performed.
func (n *LeaseNode) recover(env Env, now time.Time, effs []lease.Effect) {
	held := append(n.held, effs...)
	n.failDisk, n.failUntil, n.held = nil, time.Time{}, nil
	env.Logf("database commits succeed again: %d held effects", len(held))
	n.perform(env, now, n.m.AfterHeld(held))
}

// perform performs effects in order through lease.Perform, the table the
// agent shares.
func (n *LeaseNode) perform(env Env, now time.Time, effs []lease.Effect) {
	p := simPerformer{n: n, env: env, now: now}
	for _, e := range effs {
		lease.Perform(p, e)
	}
}

// simPerformer is the LeaseNode's lease.Performer.
type simPerformer struct {
	n   *LeaseNode
	env Env
	now time.Time
}

func (p simPerformer) Record(e lease.Effect) {
	switch e := e.(type) {
	case lease.EnteredState:
		p.env.Logf("%s -> %s (epoch %d)", orNew(e.From), e.To, e.Epoch)
	case lease.Failed:
		p.env.Logf("FAILED: %s", e.Reason)
	case lease.QuorumReport:
		p.env.Logf("quorum report (lost at %s)", e.LostAt.Format(time.TimeOnly))
	default:
		p.n.fail(p.env, fmt.Errorf("unknown effect %T: %s", e, strings.TrimSpace(e.String())))
	}
}

func (p simPerformer) Start(e lease.StartWorkload) { p.env.Start(e.ID, e.Epoch) }

func (p simPerformer) Stop(e lease.StopWorkload) {
	p.env.Stop(e.ID)
	p.env.Logf("  stop reason: %s", e.Reason)
}

// Respawn restarts at once (lease emits it only when due); RespawnDone
// follows as the next input.
func (p simPerformer) Respawn(e lease.AttemptRespawn) {
	p.env.Logf("respawn attempt %d", e.Attempt)
	p.env.Start(e.ID, e.Epoch)
	p.env.At(p.now, timerRespawn{workload: e.ID, epoch: e.Epoch, attempt: e.Attempt})
}

// Queue puts the event in the outbox (its row "committed" with the step)
// and sends it.
func (p simPerformer) Queue(e lease.Effect) {
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
	n.enqueue(env, p.now, n.outboxEvent(p.now, e))
}

func (p simPerformer) PublishClaim(e lease.PublishClaim) {
	env, n := p.env, p.n
	env.Logf("publishes claim for epoch %d", e.Epoch)
	if w, ok := n.m.Workload(e.ID); ok && w.Trigger == lease.TriggerTakeover && !n.reissuing {
		env.Report(TakeoverClaim{Workload: e.ID, Epoch: w.Epoch})
	}
	id := env.Publish(Event{Kind: KindClaim, CreatedAt: n.createdAt("claim:"+e.ID, p.now), D: ClaimD(e.ID), Body: LeaseClaim{
		Workload: e.ID, Epoch: e.Epoch, Active: true,
	}}, nil)
	n.pubs[id] = &claimPub{workload: e.ID, epoch: e.Epoch}
}

func (p simPerformer) ReadClaims(e lease.ReadClaims) {
	p.env.At(e.At, timerRead{workload: e.ID, epoch: e.Epoch})
}

// outboxEvent is the event an Outbox effect (lease.DurabilityOf) puts in
// the durable outbox, built as the agent builds it: created_at strictly
// increasing per d tag.
func (n *LeaseNode) outboxEvent(now time.Time, e lease.Effect) Event {
	switch e := e.(type) {
	case lease.PublishRevocation:
		var q int64
		if !e.QuorumAt.IsZero() {
			q = e.QuorumAt.UnixMilli() // whole milliseconds, rounded down, as on the wire
		}
		return Event{Kind: KindRevocation, CreatedAt: n.createdAt("rev:"+e.ID, now), D: e.ID, Body: LeaseRevocation{
			Workload: e.ID, Epoch: e.Epoch, Successor: e.Successor, Standbys: e.Standbys, Reason: e.Reason, QuorumAt: q,
		}}
	case lease.WithdrawClaim:
		return Event{Kind: KindClaim, CreatedAt: n.createdAt("claim:"+e.ID, now), D: ClaimD(e.ID), Body: LeaseClaim{
			Workload: e.ID, Epoch: e.Epoch, Active: false,
		}}
	case lease.AnnouncePromotion:
		return Event{Kind: KindClaim, CreatedAt: n.createdAt("announce:"+e.ID, now), D: AnnouncementD(e.ID), Body: LeaseAnnouncement{
			Workload: e.ID, Epoch: e.Epoch,
		}}
	}
	panic(fmt.Sprintf("sim: %T is not an outbox effect", e)) // lease.DurabilityOf and this switch disagree
}

func describeEffects(effs []lease.Effect) string {
	var parts []string
	for _, e := range effs {
		if _, ok := e.(lease.EnteredState); ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%T", e)[len("lease."):])
	}
	return strings.Join(parts, ", ")
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
