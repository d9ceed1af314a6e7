package lease

import (
	"fmt"
	"strings"
	"time"
)

// Effect is one action the driver must perform, in slice order, after it has
// persisted the machine's new state. Switch on the concrete type.
type Effect interface {
	// Workload is the ID of the workload the effect concerns.
	Workload() string
	// String is a one-line human-readable form for logs.
	String() string
	isEffect()
}

// EnteredState reports a transition. It is informational (logs, metrics,
// status page); the driver has already persisted the new state.
type EnteredState struct {
	ID    string
	From  State // empty when the workload was just tracked
	To    State
	Epoch uint64 // the workload's epoch after the transition
}

// StartWorkload asks the driver to start (or make sure it runs) the workload
// process at Epoch. It is idempotent for the driver: after a restart the
// machine may ask to start a process that still runs.
type StartWorkload struct {
	ID    string
	Epoch uint64
}

// StopWorkload asks the driver to stop the workload process (fencing). When
// it precedes a PublishRevocation in the same slice, the driver must finish
// the stop before it hands the revocation to the outbox (rule 7). It is
// idempotent for the driver: Restore re-issues it for every workload not
// held here, whose process may or may not still run. Epoch is the
// workload's epoch as the machine knows it; the driver stops whatever
// process of the workload runs.
type StopWorkload struct {
	ID     string
	Epoch  uint64
	Reason string
}

// PublishRevocation asks the driver to publish a lease revocation (kind
// 38385) for Epoch through the durable outbox. Successor is the first standby
// this provider still saw alive, or empty when it saw none (the standbys then
// rely on takeover). QuorumAt is the last time this provider's own
// heartbeats, listing the workload at Epoch, came back from M relays (zero:
// never at this epoch); the successor may claim on the revocation only
// before a takeover could have begun, which QuorumAt bounds (see
// RevocationDeadline).
type PublishRevocation struct {
	ID        string
	Epoch     uint64
	Successor string
	Standbys  []string
	Reason    string
	QuorumAt  time.Time
}

// PublishClaim asks the driver to publish an active promotion claim (kind
// 38386, d tag per workload) for Epoch to every relay of the lease, then to
// report how many relays answered OK true with Machine.ClaimPublished.
type PublishClaim struct {
	ID    string
	Epoch uint64
}

// WithdrawClaim asks the driver to replace this provider's claim for the
// workload (same d tag) with a withdrawn marker for Epoch, so it no longer
// blocks other claimers. No feedback is expected.
type WithdrawClaim struct {
	ID    string
	Epoch uint64
}

// AnnouncePromotion asks the driver to publish, through the durable outbox,
// the Paygress v1 promotion announcement (kind 38386 under
// paygress:promoted:v1:<workload>) that this provider now holds the
// workload at Epoch. The machine emits it once, right after the StartWorkload
// of a won claim step (Paygress starts the workload first and announces
// after). Only a won claim is announced there: a Paygress node reads any
// event under that d tag as a promotion, so the claim step's own claims and
// withdrawn markers live under another d tag.
type AnnouncePromotion struct {
	ID    string
	Epoch uint64
}

// ReadClaims asks the driver, at or after At, to read the promotion claims and
// announcements of the workload from the relays, feed every claim it finds with
// Machine.ObserveClaim, and then report with Machine.ClaimsRead. Unlike
// AttemptRespawn it is emitted ahead of time: reading is harmless, and
// ClaimsRead decides (starting the workload or not) from the machine's state
// when the report arrives, ignoring it unless the workload is still reading
// for that epoch.
type ReadClaims struct {
	ID    string
	Epoch uint64
	At    time.Time
}

// AttemptRespawn asks the driver to restart the workload process now, then
// to report with Machine.RespawnDone carrying Attempt. The machine emits it
// only once the attempt is due (from Tick, or RelaySynced re-issuing an
// attempt whose report a restart lost), only while the workload is
// Respawning at that attempt, and never while a restored machine awaits
// relay sync; so the driver performs it at once, in order with the other
// effects, and never waits for At.
type AttemptRespawn struct {
	ID      string
	Epoch   uint64
	Attempt int
	// At is when the attempt was scheduled to fall due (it is at or
	// before the input's now); for logs only.
	At time.Time
}

// Failed announces that the workload failed here for good, with the reason.
type Failed struct {
	ID     string
	Epoch  uint64
	Reason string
}

// QuorumReport announces, once per loss episode, that a held workload without
// a standby has lacked relay quorum for T1+T2 since LostAt and keeps running
// because eviction does not apply to it (rule 6). Log and count it.
type QuorumReport struct {
	ID     string
	Epoch  uint64
	LostAt time.Time
}

func (e EnteredState) Workload() string      { return e.ID }
func (e StartWorkload) Workload() string     { return e.ID }
func (e StopWorkload) Workload() string      { return e.ID }
func (e PublishRevocation) Workload() string { return e.ID }
func (e PublishClaim) Workload() string      { return e.ID }
func (e WithdrawClaim) Workload() string     { return e.ID }
func (e ReadClaims) Workload() string        { return e.ID }
func (e AnnouncePromotion) Workload() string { return e.ID }
func (e AttemptRespawn) Workload() string    { return e.ID }
func (e Failed) Workload() string            { return e.ID }
func (e QuorumReport) Workload() string      { return e.ID }

func (EnteredState) isEffect()      {}
func (StartWorkload) isEffect()     {}
func (StopWorkload) isEffect()      {}
func (PublishRevocation) isEffect() {}
func (PublishClaim) isEffect()      {}
func (WithdrawClaim) isEffect()     {}
func (ReadClaims) isEffect()        {}
func (AnnouncePromotion) isEffect() {}
func (AttemptRespawn) isEffect()    {}
func (Failed) isEffect()            {}
func (QuorumReport) isEffect()      {}

func (e EnteredState) String() string {
	from := string(e.From)
	if from == "" {
		from = "(new)"
	}
	return fmt.Sprintf("entered %s %s -> %s epoch=%d", e.ID, from, e.To, e.Epoch)
}

func (e StartWorkload) String() string {
	return fmt.Sprintf("start %s epoch=%d", e.ID, e.Epoch)
}

func (e StopWorkload) String() string {
	return fmt.Sprintf("stop %s epoch=%d reason=%q", e.ID, e.Epoch, e.Reason)
}

func (e PublishRevocation) String() string {
	q := "-"
	if !e.QuorumAt.IsZero() {
		q = e.QuorumAt.Format(time.RFC3339)
	}
	return fmt.Sprintf("revoke %s epoch=%d successor=%s standbys=[%s] quorum_at=%s reason=%q",
		e.ID, e.Epoch, e.Successor, strings.Join(e.Standbys, ","), q, e.Reason)
}

func (e PublishClaim) String() string {
	return fmt.Sprintf("claim %s epoch=%d", e.ID, e.Epoch)
}

func (e WithdrawClaim) String() string {
	return fmt.Sprintf("withdraw %s epoch=%d", e.ID, e.Epoch)
}

func (e AnnouncePromotion) String() string {
	return fmt.Sprintf("announce %s epoch=%d", e.ID, e.Epoch)
}

func (e ReadClaims) String() string {
	return fmt.Sprintf("read-claims %s epoch=%d at=%s", e.ID, e.Epoch, e.At.Format(time.RFC3339Nano))
}

func (e AttemptRespawn) String() string {
	return fmt.Sprintf("respawn %s epoch=%d attempt=%d at=%s", e.ID, e.Epoch, e.Attempt, e.At.Format(time.RFC3339Nano))
}

func (e Failed) String() string {
	return fmt.Sprintf("failed %s epoch=%d reason=%q", e.ID, e.Epoch, e.Reason)
}

func (e QuorumReport) String() string {
	return fmt.Sprintf("quorum-lost %s epoch=%d since=%s", e.ID, e.Epoch, e.LostAt.Format(time.RFC3339Nano))
}

// Durability says how a driver performs an effect; Perform dispatches on
// it for the agent and the simulator in props/ alike, so they cannot drift
// apart.
type Durability int

const (
	// Record: log and count. A crash that drops it loses nothing.
	Record Durability = iota
	// Process: start, stop or restart the workload process, in slice order
	// (a stop before the revocation after it). Idempotent; after a restart
	// Restore, RelaySynced and Outstanding re-issue what may have been lost.
	Process
	// Outbox: an event that must reach the relays whatever happens
	// (revocations, withdrawn markers, announcements): its outbox row is
	// committed in the same transaction as the step, and the outbox retries
	// it until M relays accepted it.
	Outbox
	// Feedback: a request whose answer the machine awaits (the claim step's
	// publish and read). Sent directly; after a restart Outstanding
	// re-issues it, and ClaimTimeout bounds a round that never answers.
	Feedback
)

func (d Durability) String() string {
	switch d {
	case Record:
		return "record"
	case Process:
		return "process"
	case Outbox:
		return "outbox"
	case Feedback:
		return "feedback"
	}
	return fmt.Sprintf("durability(%d)", int(d))
}

// DurabilityOf classifies an effect (see Durability).
func DurabilityOf(e Effect) Durability {
	switch e.(type) {
	case StartWorkload, StopWorkload, AttemptRespawn:
		return Process
	case PublishRevocation, WithdrawClaim, AnnouncePromotion:
		return Outbox
	case PublishClaim, ReadClaims:
		return Feedback
	}
	return Record
}

// BeforeCommit reports whether a driver performs e as soon as the machine
// returns it, before the step is persisted: stops, and the effects that
// only report. Fencing is always safe to do early (a crash before the
// commit restores an older state, and workloads die with their agent, so
// an early stop is a crash one step earlier), and it must never wait on a
// database that is full, broken or locked by another process. Every other
// effect waits until its step is persisted.
func BeforeCommit(e Effect) bool {
	switch e.(type) {
	case StopWorkload:
		return true
	}
	return DurabilityOf(e) == Record
}

// AfterHeld returns what a driver performs once steps whose commit failed
// (and which it held) are finally persisted, given those steps' effects in
// order. They are not replayed as they were, since the machine has moved
// on: every outbox effect is performed (queued) in order; a workload whose
// start or respawn was held is started only if the machine still holds it
// in a running state (provisioning, live, suspect), so a start a later
// stop superseded never runs; and the machine's outstanding requests
// (Outstanding: claim-step publish and read, respawns) are re-issued for
// the workloads whose requests were held. Effects performed before the
// commit (BeforeCommit) were performed already and are left out.
func (m *Machine) AfterHeld(held []Effect) []Effect {
	var out []Effect
	restart, requests := map[string]bool{}, map[string]bool{}
	var order []string
	for _, e := range held {
		id := e.Workload()
		switch e.(type) {
		case StartWorkload, AttemptRespawn:
			if !restart[id] {
				order = append(order, id)
			}
			restart[id] = true
		case StopWorkload:
			delete(restart, id)
		case PublishClaim, ReadClaims:
			requests[id] = true
		}
		if DurabilityOf(e) == Outbox {
			out = append(out, e)
		}
	}
	for _, id := range order {
		w := m.byID[id]
		if !restart[id] || w == nil {
			continue
		}
		switch w.State {
		case StateProvisioning, StateLive, StateSuspect:
			out = append(out, StartWorkload{ID: id, Epoch: w.Epoch})
		}
	}
	if len(restart) > 0 || len(requests) > 0 {
		for _, e := range m.Outstanding() {
			if id := e.Workload(); restart[id] || requests[id] {
				out = append(out, e)
			}
		}
	}
	return out
}

// AfterCommit returns the effects of one step that a driver performs once
// the step is persisted, in order: all but the BeforeCommit ones (already
// performed), and without a start or respawn that a later stop of the same
// workload in the step supersedes (that stop ran first).
func AfterCommit(effs []Effect) []Effect {
	lastStop := map[string]int{}
	for i, e := range effs {
		if s, ok := e.(StopWorkload); ok {
			lastStop[s.ID] = i
		}
	}
	var out []Effect
	for i, e := range effs {
		if BeforeCommit(e) {
			continue
		}
		switch e.(type) {
		case StartWorkload, AttemptRespawn:
			if j, ok := lastStop[e.Workload()]; ok && j > i {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}
