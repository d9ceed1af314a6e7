package lease

import (
	"fmt"
	"time"
)

// SnapshotVersion is the version written into every Snapshot.
const SnapshotVersion = 1

// ClaimPhase is where a Promoting workload stands in the claim step.
type ClaimPhase string

const (
	// PhaseNone: not in the claim step.
	PhaseNone ClaimPhase = ""
	// PhasePublishing: PublishClaim was emitted; waiting for ClaimPublished.
	PhasePublishing ClaimPhase = "publishing"
	// PhaseReading: M relays accepted; ReadClaims was emitted for PhaseAt;
	// waiting for ClaimsRead.
	PhaseReading ClaimPhase = "reading"
	// PhaseBackoff: the claim was withdrawn; the next attempt starts at
	// PhaseAt.
	PhaseBackoff ClaimPhase = "backoff"
)

// Trigger says why a standby entered the claim step.
type Trigger string

const (
	// TriggerRevocation: the holder's revocation named this standby.
	TriggerRevocation Trigger = "revocation"
	// TriggerTakeover: the holder was silent for TakeoverAfter on N-M+1
	// relays on which this standby is healthy.
	TriggerTakeover Trigger = "takeover"
	// TriggerRetake: this provider evicted itself (quorum loss) and, healthy
	// again on N-M+1 relays for TakeoverAfter since, saw no higher epoch:
	// its standbys never claimed, so it takes the workload back.
	TriggerRetake Trigger = "retake"
)

// RivalClaim is an active promotion claim by another provider for an epoch
// above the one this provider knows.
type RivalClaim struct {
	Claimer string    `json:"claimer"`
	Epoch   uint64    `json:"epoch"`
	SeenAt  time.Time `json:"seen_at"`
}

// ClaimMark is the created_at of the newest claim event from one claimer.
type ClaimMark struct {
	Claimer   string    `json:"claimer"`
	CreatedAt time.Time `json:"created_at"`
}

// WorkloadSnapshot is the persisted state of one workload as seen by this
// provider: one SQLite row per workload in the agent. Times are this
// provider's local clock.
type WorkloadSnapshot struct {
	Spec  Spec      `json:"spec"`
	State State     `json:"state"`
	Since time.Time `json:"since"` // when State was entered
	// Holder and Epoch are the current holder as this provider knows it;
	// they move on from Spec.Primary/Spec.Epoch at promotions.
	Holder string `json:"holder"`
	Epoch  uint64 `json:"epoch"`
	// HoldFrom is when this provider began holding at Epoch (the grant, or
	// the first publication of its winning claim). The quorum-loss debounce
	// never starts before it.
	HoldFrom time.Time `json:"hold_from,omitzero"`
	// Attempts is the number of respawn attempts in the current series.
	Attempts int `json:"attempts,omitempty"`
	// HealthySince is when the workload last entered Live.
	HealthySince time.Time `json:"healthy_since,omitzero"`
	// RespawnAt is when the pending respawn attempt (number Attempts) is
	// due, while Respawning.
	RespawnAt time.Time `json:"respawn_at,omitzero"`
	// RespawnIssued is true once AttemptRespawn for attempt Attempts was
	// emitted (it was due, and the machine was not awaiting relay sync);
	// RespawnDone is then awaited. Respawning only.
	RespawnIssued bool `json:"respawn_issued,omitempty"`
	// Reported is true once the current quorum loss was reported (rule 6).
	Reported bool `json:"reported,omitempty"`
	// Resume is the state a Syncing workload returns to, and ResumeSince
	// the Since it returns with.
	Resume      State     `json:"resume,omitempty"`
	ResumeSince time.Time `json:"resume_since,omitzero"`
	// WatchFrom is when this standby began watching Holder at Epoch.
	WatchFrom time.Time `json:"watch_from,omitzero"`
	// ClaimAt holds, per relay (Snapshot.Relays order), the local time of
	// the last counting heartbeat in which Holder listed the workload at Epoch.
	ClaimAt []time.Time `json:"claim_at,omitempty"`
	// Rivals are active claims by others for epochs above Epoch.
	Rivals []RivalClaim `json:"rivals,omitempty"`
	// ClaimMarks hold, per other provider, the created_at of the newest
	// claim event (claim, withdrawn marker or announcement) seen from it
	// for this workload: claims are replaceable events, so an older version
	// delivered late (a reordering link, a relay that missed the
	// withdrawal) is ignored.
	ClaimMarks []ClaimMark `json:"claim_marks,omitempty"`
	// Revoked is true once the holder's revocation for Epoch was seen.
	Revoked bool `json:"revoked,omitempty"`
	// Claim step state (Promoting only).
	Target       uint64     `json:"target,omitempty"`
	ClaimAttempt int        `json:"claim_attempt,omitempty"`
	Phase        ClaimPhase `json:"phase,omitempty"`
	PhaseAt      time.Time  `json:"phase_at,omitzero"`
	ClaimFrom    time.Time  `json:"claim_from,omitzero"`
	Trigger      Trigger    `json:"trigger,omitempty"`
	// RevokeBy is the RevocationDeadline of the revocation that started a
	// claim step (TriggerRevocation): the claim step must have read the
	// relays by then, else it gives way to the takeover rule.
	RevokeBy time.Time `json:"revoke_by,omitzero"`
	// Restore is where restoring the state of Epoch stands (workloads
	// with a checkpoint policy whose epoch began here); RestoreAt is when
	// the running attempt times out or the next one starts,
	// RestoreAttempt the attempt number, RestoreWhy the last outcome and
	// RestoreHint the state_uri of the revocation that handed the
	// workload over.
	Restore        RestorePhase `json:"restore,omitempty"`
	RestoreAt      time.Time    `json:"restore_at,omitzero"`
	RestoreAttempt int          `json:"restore_attempt,omitempty"`
	RestoreWhy     string       `json:"restore_why,omitempty"`
	RestoreHint    string       `json:"restore_hint,omitempty"`
	// Evidence is the newest checkpoint the heartbeats of the holders
	// followed here named (see CheckpointEvidence).
	Evidence CheckpointEvidence `json:"evidence,omitzero"`
	// Holders are the epochs whose holder this provider knows (at most
	// 16, the newest), for checking checkpoint records.
	Holders []EpochHolder `json:"holders,omitempty"`

	holder   int       // provider index of Holder
	named    []int     // provider indices of Spec.Primary and Spec.Standbys
	idx      int       // position in Machine.list and Machine.wake
	rank     int       // this provider's standby rank (see Machine.rank)
	wakeHint time.Time // earliest takeover time found by takeoverDue
}

// ProviderSnapshot is one provider's relay table: per relay (Snapshot.Relays
// order) the local time of its last counting heartbeat, the created_at of
// the last accepted one, and the local time of the last counting one that
// listed no workloads (a Paygress peer). (Snapshots written before the
// relay watch replaced them also hold "stretch": ignored.)
type ProviderSnapshot struct {
	ID       string      `json:"id"`
	Seen     []time.Time `json:"seen"`
	Created  []time.Time `json:"created"`
	Unlisted []time.Time `json:"unlisted"`
	// QuorumUntil is when this provider loses quorum unless more heartbeats
	// arrive: the M-th most recent Seen plus Stale. Zero: never had quorum.
	QuorumUntil time.Time `json:"quorum_until,omitzero"`
	// Complete holds, per relay, the created_at of the newest whole beat it
	// delivered (see Machine.quorumAt); nil until one did.
	Complete []time.Time `json:"complete,omitempty"`

	beats []beat // per relay, the sharded beat being assembled (not persisted)
}

// beat tracks which shards of one sharded beat (one created_at) a relay
// delivered, and when its first shard came.
type beat struct {
	first  time.Time
	got    []uint64 // bitmap of shard indices
	n      int      // distinct shards received
	shards int      // shards the beat's first event announced
}

// Snapshot is the whole machine, serialisable as JSON. Restore turns it back
// into a Machine.
type Snapshot struct {
	Version      int                `json:"version"`
	Self         string             `json:"self"`
	Now          time.Time          `json:"now"`
	Relays       []string           `json:"relays"`
	AwaitingSync bool               `json:"awaiting_sync,omitempty"`
	Synced       []bool             `json:"synced,omitempty"`
	ClockSuspect bool               `json:"clock_suspect,omitempty"`
	ClockWhy     string             `json:"clock_why,omitempty"`
	Draining     bool               `json:"draining,omitempty"`
	Providers    []ProviderSnapshot `json:"providers"`
	Workloads    []WorkloadSnapshot `json:"workloads"`
}

func (w *WorkloadSnapshot) copy() WorkloadSnapshot {
	c := *w
	c.Spec = w.Spec.clone()
	c.ClaimAt = append([]time.Time(nil), w.ClaimAt...)
	c.Rivals = append([]RivalClaim(nil), w.Rivals...)
	c.ClaimMarks = append([]ClaimMark(nil), w.ClaimMarks...)
	c.Holders = append([]EpochHolder(nil), w.Holders...)
	c.named = append([]int(nil), w.named...)
	return c
}

func (p *ProviderSnapshot) copy() ProviderSnapshot {
	c := *p
	c.Seen = append([]time.Time(nil), p.Seen...)
	c.Created = append([]time.Time(nil), p.Created...)
	c.Unlisted = append([]time.Time(nil), p.Unlisted...)
	c.Complete = append([]time.Time(nil), p.Complete...)
	c.beats = nil
	return c
}

// Snapshot returns a deep copy of the machine's state.
func (m *Machine) Snapshot() Snapshot {
	s := m.MetaSnapshot()
	s.Workloads = make([]WorkloadSnapshot, len(m.list))
	for i, w := range m.list {
		s.Workloads[i] = w.public()
	}
	return s
}

// MetaSnapshot is Snapshot without the workloads (Workloads nil): what a
// driver that persists each workload's row on its own saves besides them,
// without copying every workload.
func (m *Machine) MetaSnapshot() Snapshot {
	s := Snapshot{
		Version:      SnapshotVersion,
		Self:         m.self,
		Now:          m.now,
		Relays:       append([]string(nil), m.relays...),
		AwaitingSync: m.awaitingSync,
		ClockSuspect: m.clockSuspect,
		ClockWhy:     m.clockWhy,
		Draining:     m.draining,
		Providers:    make([]ProviderSnapshot, len(m.provs)),
	}
	if m.awaitingSync {
		s.Synced = append([]bool(nil), m.synced...)
	}
	// One backing array for every provider's relay-indexed times (a
	// driver saves this every few seconds; five allocations per provider
	// showed in its profile). Each slice is capped at its length, so an
	// append to one never writes into the next.
	n := 0
	for i := range m.provs {
		p := &m.provs[i]
		n += len(p.Seen) + len(p.Created) + len(p.Unlisted) + len(p.Complete)
	}
	buf := make([]time.Time, 0, n)
	take := func(src []time.Time) []time.Time {
		if len(src) == 0 {
			return nil // as append([]time.Time(nil), src...) gives
		}
		start := len(buf)
		buf = append(buf, src...)
		return buf[start:len(buf):len(buf)]
	}
	for i := range m.provs {
		p := &m.provs[i]
		c := *p
		c.Seen, c.Created, c.Unlisted = take(p.Seen), take(p.Created), take(p.Unlisted)
		c.Complete = take(p.Complete)
		c.beats = nil
		s.Providers[i] = c
	}
	return s
}

// public is a deep copy without the derived index fields.
func (w *WorkloadSnapshot) public() WorkloadSnapshot {
	c := w.copy()
	c.holder, c.named, c.idx, c.rank, c.wakeHint = 0, nil, 0, 0, time.Time{}
	return c
}

// Workload returns a copy of one workload's persisted state.
func (m *Machine) Workload(id string) (WorkloadSnapshot, bool) {
	w := m.byID[id]
	if w == nil {
		return WorkloadSnapshot{}, false
	}
	return w.public(), true
}

// Restore rebuilds a machine from a snapshot taken by Snapshot, for an agent
// restart at now. The restored machine produces the same effects for the same
// inputs as the machine that was snapshotted, except rule 10: every workload
// that was Live or Suspect enters Syncing (and any that becomes Live later
// does too) until M relays have reported RelaySynced, no respawn is attempted
// before then, and completing the sync re-issues any AttemptRespawn whose
// RespawnDone was still awaited.
//
// The returned effects are, first, one StopWorkload for every workload this
// provider does not hold (every state but the Holding ones: a stop persisted
// before the restart may never have been performed, and the process may
// still run), then the EnteredState transitions into Syncing. The driver
// performs them like any other effects; StopWorkload is idempotent.
func Restore(now time.Time, cfg Config, snap Snapshot) (*Machine, []Effect, error) {
	bad := func(format string, args ...any) (*Machine, []Effect, error) {
		return nil, nil, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSnapshot}, args...)...)
	}
	if snap.Version != SnapshotVersion {
		return bad("version = %d, want %d", snap.Version, SnapshotVersion)
	}
	m, err := New(cfg, snap.Self)
	if err != nil {
		return nil, nil, fmt.Errorf("restore: %w", err)
	}
	if len(snap.Relays) != len(m.relays) {
		return bad("relays has %d entries, config has %d", len(snap.Relays), len(m.relays))
	}
	for i, r := range snap.Relays {
		if r != m.relays[i] {
			return bad("relays[%d] = %q, config has %q", i, r, m.relays[i])
		}
	}
	n := len(m.relays)
	m.now = snap.Now.UTC()
	for _, p := range snap.Providers {
		if !IsHexPubkey(p.ID) {
			return bad("provider %q is not a hex pubkey", p.ID)
		}
		if len(p.Seen) != n || len(p.Created) != n || len(p.Unlisted) != n ||
			(p.Complete != nil && len(p.Complete) != n) {
			return bad("provider %s relay table has wrong size", p.ID)
		}
		i := m.provider(p.ID)
		c := p.copy()
		for j := range c.Seen {
			c.Seen[j], c.Created[j], c.Unlisted[j] = c.Seen[j].UTC(), c.Created[j].UTC(), c.Unlisted[j].UTC()
		}
		for j := range c.Complete {
			c.Complete[j] = c.Complete[j].UTC()
		}
		c.QuorumUntil = c.QuorumUntil.UTC()
		m.provs[i] = c
	}
	for i := range snap.Workloads {
		w := snap.Workloads[i].copy()
		if err := w.Spec.Validate(); err != nil {
			return bad("workload %d: %v", i, err)
		}
		if !w.State.Valid() {
			return bad("workload %s: state = %q", w.Spec.ID, w.State)
		}
		if m.byID[w.Spec.ID] != nil {
			return bad("workload %s appears twice", w.Spec.ID)
		}
		if !IsHexPubkey(w.Holder) {
			return bad("workload %s: holder = %q", w.Spec.ID, w.Holder)
		}
		if len(w.ClaimAt) != n {
			return bad("workload %s: claim_at has %d entries, want %d", w.Spec.ID, len(w.ClaimAt), n)
		}
		switch w.Phase {
		case PhaseNone, PhasePublishing, PhaseReading, PhaseBackoff:
		default:
			return bad("workload %s: phase = %q", w.Spec.ID, w.Phase)
		}
		if (w.State == StatePromoting) != (w.Phase != PhaseNone) || (w.State == StatePromoting && w.Target != w.Epoch+1) {
			return bad("workload %s: state %q with phase %q, target %d, epoch %d", w.Spec.ID, w.State, w.Phase, w.Target, w.Epoch)
		}
		if w.Epoch < 1 || w.Epoch > MaxEpoch || w.Attempts < 0 || len(w.Rivals) > len(w.Spec.Standbys)+1 ||
			len(w.ClaimMarks) > len(w.Spec.Standbys)+1 {
			return bad("workload %s: epoch %d, attempts %d, %d rivals, %d claim marks", w.Spec.ID, w.Epoch, w.Attempts, len(w.Rivals), len(w.ClaimMarks))
		}
		if w.State == StateSyncing && w.Resume != StateLive && w.Resume != StateSuspect {
			return bad("workload %s: syncing with resume = %q", w.Spec.ID, w.Resume)
		}
		if w.RespawnIssued && w.State != StateRespawning {
			return bad("workload %s: respawn issued in state %q", w.Spec.ID, w.State)
		}
		switch w.Restore {
		case RestoreNone, RestoreRunning, RestoreWaiting, RestoreDone, RestoreFresh:
		default:
			return bad("workload %s: restore = %q", w.Spec.ID, w.Restore)
		}
		if w.Restore.pending() && (w.State != StateProvisioning || w.Spec.Checkpoint == nil) || len(w.Holders) > maxHolders {
			return bad("workload %s: restore %q in state %q, %d holders", w.Spec.ID, w.Restore, w.State, len(w.Holders))
		}
		w.normaliseTimes()
		m.add(&w)
	}
	m.now = maxTime(m.now, now.UTC())
	m.clockSuspect, m.clockWhy, m.draining = snap.ClockSuspect, snap.ClockWhy, snap.Draining
	m.awaitingSync = true
	m.synced = make([]bool, n)
	var out []Effect
	for _, w := range m.list {
		if !w.State.Holding() {
			out = append(out, StopWorkload{ID: w.Spec.ID, Epoch: w.Epoch,
				Reason: fmt.Sprintf("restart: not held here (%s)", w.State)})
		}
	}
	for _, w := range m.list {
		if w.State == StateLive || w.State == StateSuspect {
			w.Resume, w.ResumeSince = w.State, w.Since
			m.enter(w, StateSyncing, &out)
		}
	}
	return m, out, nil
}

func (w *WorkloadSnapshot) normaliseTimes() {
	w.Since = w.Since.UTC()
	w.HoldFrom = w.HoldFrom.UTC()
	w.HealthySince = w.HealthySince.UTC()
	w.RespawnAt = w.RespawnAt.UTC()
	w.WatchFrom = w.WatchFrom.UTC()
	w.ResumeSince = w.ResumeSince.UTC()
	w.PhaseAt = w.PhaseAt.UTC()
	w.ClaimFrom = w.ClaimFrom.UTC()
	w.RevokeBy = w.RevokeBy.UTC()
	w.RestoreAt = w.RestoreAt.UTC()
	for i := range w.Holders {
		w.Holders[i].From = w.Holders[i].From.UTC()
	}
	w.Spec.CreatedAt = w.Spec.CreatedAt.UTC()
	w.Spec.ExpiresAt = w.Spec.ExpiresAt.UTC()
	for i := range w.ClaimAt {
		w.ClaimAt[i] = w.ClaimAt[i].UTC()
	}
	for i := range w.Rivals {
		w.Rivals[i].SeenAt = w.Rivals[i].SeenAt.UTC()
	}
	for i := range w.ClaimMarks {
		w.ClaimMarks[i].CreatedAt = w.ClaimMarks[i].CreatedAt.UTC()
	}
}
