package lease

import (
	"fmt"
	"time"
)

// Tick advances every workload to now: quorum-loss debounce (rules 1, 2, 6),
// eviction (rule 7), provisioning and sync timeouts (rules 10, 11), respawn
// counter reset (rule 5), takeover (rule 8), claim-step timeouts and retries,
// and lease expiry. It is O(workloads * N) and reads no observations: quorum
// is a function of the per-relay tables. The driver calls it periodically
// (every second or so) and after feeding observations.
func (m *Machine) Tick(now time.Time) []Effect {
	now = m.clock(now)
	nowNS := now.UnixNano()
	var out []Effect
	self := &m.provs[m.selfIdx]
	for i, wake := range m.wake {
		if wake > nowNS {
			continue // nothing can happen to this workload yet
		}
		w := m.list[i]
		m.tickOne(w, now, self, &out)
		m.wake[i] = m.nextWake(w, now, self)
	}
	return out
}

func (m *Machine) tickOne(w *WorkloadSnapshot, now time.Time, self *ProviderSnapshot, out *[]Effect) {
	if w.State.Terminal() {
		return
	}
	if !w.Spec.ExpiresAt.IsZero() && !now.Before(w.Spec.ExpiresAt) {
		m.expire(w, out)
		return
	}
	switch {
	case w.State.Holding():
		m.tickHolder(w, now, self, out)
	case w.State == StateEvicted:
		if w.Holder == m.self && !m.awaitingSync && !m.clockSuspect && !m.draining && len(w.Rivals) == 0 && m.claimSlot() && m.retakeDue(w, now) {
			m.promote(w, TriggerRetake, out)
		}
	case w.State == StateStandby:
		w.wakeHint = time.Time{}
		m.tickStandby(w, now, out)
	case w.State == StatePromoting:
		m.tickPromoting(w, now, out)
	case w.State == StateFenced:
		// A claim fenced it and the claimer was never heard holding:
		// once the claim has stood for settle, follow the claimer as a
		// standby does, so that the takeover rule covers a claimer that
		// failed or died before its first heartbeat reached here.
		if m.adoptSettled(w, now) {
			m.enter(w, StateStandby, out)
		}
	}
}

// nextWake is a lower bound of the next time Tick can change anything for w
// without another input touching it, or 0 when Tick must always look. Live,
// Standby (the states nearly every workload sits in) and Respawning sleep:
// their deadlines (quorum loss + T1 or + T1+T2, respawn counter reset,
// takeover, the respawn's due time, expiry) can only move later as
// heartbeats arrive, and the inputs that set them touch the workload.
func (m *Machine) nextWake(w *WorkloadSnapshot, now time.Time, self *ProviderSnapshot) int64 {
	const never = int64(^uint64(0) >> 1)
	var at time.Time
	switch w.State {
	case StateFailed, StateExpired:
		return never
	case StateFenced:
		// Not terminal: a fenced provider rejoins as a standby when it
		// hears the holder (an input) or when the claim that fenced it
		// has settled; otherwise only its expiry is due. It slept for
		// ever, so a fenced workload never expired until a restart
		// ticked it (props TestMachineProperties, restored twin).
		if len(w.Rivals) > 0 {
			return 0 // until the claim settles, as a standby's rivals
		}
		if w.Spec.ExpiresAt.IsZero() {
			return never
		}
		at = w.Spec.ExpiresAt
	case StateLive:
		at = maxTime(self.QuorumUntil, w.HoldFrom).Add(m.cfg.T1)
		if w.Attempts > 0 {
			if r := w.HealthySince.Add(m.cfg.RestartResetAfter); r.Before(at) {
				at = r
			}
		}
	case StateStandby:
		if len(w.Rivals) > 0 || w.wakeHint.IsZero() {
			return 0
		}
		at = w.wakeHint
	case StateEvicted:
		// retakeDue counts from the eviction at the earliest; claims and
		// heartbeats that fence it touch the workload.
		at = w.Since.Add(m.cfg.TakeoverAfter)
	case StateRespawning:
		// The respawn falls due at RespawnAt (not before relay sync:
		// RelaySynced wakes every workload); eviction at T1+T2 after
		// quorum loss, which heartbeats only move later.
		if m.evicting(w) {
			at = maxTime(self.QuorumUntil, w.HoldFrom).Add(m.cfg.T1 + m.cfg.T2)
		}
		if !w.RespawnIssued && !m.awaitingSync && (at.IsZero() || w.RespawnAt.Before(at)) {
			at = w.RespawnAt
		}
		if at.IsZero() {
			if w.Spec.ExpiresAt.IsZero() {
				return never // nothing but an input can change it
			}
			at = w.Spec.ExpiresAt
		}
	default:
		return 0
	}
	if !w.Spec.ExpiresAt.IsZero() && w.Spec.ExpiresAt.Before(at) {
		at = w.Spec.ExpiresAt
	}
	if !at.After(now) {
		return 0
	}
	return at.UnixNano()
}

func (m *Machine) expire(w *WorkloadSnapshot, out *[]Effect) {
	held := w.State.Holding()
	claimActive := w.State == StatePromoting && w.Phase != PhaseBackoff
	target := w.Target
	m.enter(w, StateExpired, out)
	if held {
		*out = append(*out, StopWorkload{ID: w.Spec.ID, Epoch: w.Epoch, Reason: "lease expired"})
	}
	if claimActive {
		*out = append(*out, WithdrawClaim{ID: w.Spec.ID, Epoch: target})
	}
}

// evicting reports whether quorum loss evicts w (rule 6).
func (m *Machine) evicting(w *WorkloadSnapshot) bool {
	return w.Spec.Replication == ReplicationWarmStandby || m.cfg.EvictWithoutStandby
}

func (m *Machine) tickHolder(w *WorkloadSnapshot, now time.Time, self *ProviderSnapshot, out *[]Effect) {
	if m.clockSuspect && m.evicting(w) {
		m.enter(w, StateEvicted, out)
		m.handOff(w, w.Epoch, "clock outside the bound: "+m.clockWhy, out)
		return
	}
	has := now.Before(self.QuorumUntil)
	lost := maxTime(self.QuorumUntil, w.HoldFrom) // the moment quorum was lost (rule 1)
	deadline := lost.Add(m.cfg.T1 + m.cfg.T2)
	evictDue := !has && m.evicting(w) && !now.Before(deadline)
	switch w.State {
	case StateProvisioning:
		restoring := m.tickRestore(w, now, out)
		switch {
		case has && !restoring:
			m.becomeLive(w, out)
		case evictDue:
			m.evict(w, lost, out)
		case !now.Before(w.Since.Add(m.cfg.ProvisionTimeout)) && restoring && has && !m.awaitingSync && w.Spec.Checkpoint.Mode() == RestoreBestEffort:
			// A best-effort restore still running at provision_timeout (a
			// restore_timeout longer than it) ends as its own timeout
			// would: the workload starts without a checkpoint. Handed on,
			// it stayed unrun, and so with each next holder while the
			// records could not be read.
			m.restoreFailed(w, fmt.Sprintf("no checkpoint restored within provision_timeout %v: %s", m.cfg.ProvisionTimeout, w.RestoreWhy), out)
			m.becomeLive(w, out)
		case !now.Before(w.Since.Add(m.cfg.ProvisionTimeout)) && restoring:
			// A required restore that found no usable checkpoint in time
			// (every server down, records not yet back) is no reason to
			// fail the workload for good: hand it on, as an eviction does,
			// and come back by the retake rule. Each attempt stays bounded
			// by provision_timeout (rule 11).
			why := fmt.Sprintf("restore %s: no checkpoint restored within provision_timeout %v: %s", w.Spec.Checkpoint.Mode(), m.cfg.ProvisionTimeout, w.RestoreWhy)
			m.handOn(w, why, out)
			w.RestoreWhy = why + "; " + handedOn
		case !now.Before(w.Since.Add(m.cfg.ProvisionTimeout)):
			m.relayTimeout(w, fmt.Sprintf("provision timeout: no relay quorum within %v", m.cfg.ProvisionTimeout), out)
		}
	case StateLive:
		if has {
			if w.Attempts > 0 && !now.Before(w.HealthySince.Add(m.cfg.RestartResetAfter)) {
				w.Attempts = 0
			}
			return
		}
		if now.Before(lost.Add(m.cfg.T1)) {
			return
		}
		m.enter(w, StateSuspect, out)
		m.tickSuspect(w, now, has, lost, deadline, out)
	case StateSuspect:
		m.tickSuspect(w, now, has, lost, deadline, out)
	case StateRespawning:
		if evictDue {
			m.evict(w, lost, out)
			return
		}
		m.respawnIfDue(w, out)
	case StateSyncing:
		switch {
		case evictDue:
			m.evict(w, lost, out)
		case !now.Before(w.Since.Add(m.cfg.ProvisionTimeout)):
			m.relayTimeout(w, fmt.Sprintf("relay sync timeout: fewer than %d relays synced within %v", m.cfg.M, m.cfg.ProvisionTimeout), out)
		}
	}
}

func (m *Machine) tickSuspect(w *WorkloadSnapshot, now time.Time, has bool, lost, deadline time.Time, out *[]Effect) {
	if has {
		w.Reported = false
		m.enter(w, StateLive, out)
		return
	}
	if now.Before(deadline) {
		return
	}
	if m.evicting(w) {
		m.evict(w, lost, out)
		return
	}
	if !w.Reported {
		w.Reported = true
		*out = append(*out, QuorumReport{ID: w.Spec.ID, Epoch: w.Epoch, LostAt: lost})
	}
}

// becomeLive enters Live, or Syncing while a restored machine awaits relay
// sync (rule 10).
func (m *Machine) becomeLive(w *WorkloadSnapshot, out *[]Effect) {
	w.Reported = false
	if m.awaitingSync {
		w.Resume, w.ResumeSince, w.HealthySince = StateLive, m.now, m.now
		m.enter(w, StateSyncing, out)
		return
	}
	w.HealthySince = m.now
	m.enter(w, StateLive, out)
}

// standbysBut returns the members of the lease that stand by when holder
// holds it, in rank order: the standbys other than the holder, then the
// primary when it is not the holder (after a failover the former primary
// rejoins as the last standby).
func (w *WorkloadSnapshot) standbysBut(holder string) []string {
	var out []string
	for _, s := range w.Spec.Standbys {
		if s != holder {
			out = append(out, s)
		}
	}
	if p := w.Spec.Primary; p != holder && len(w.Spec.Standbys) > 0 {
		out = append(out, p)
	}
	return out
}

// StandbysOf returns the members of w's lease that stand by for its
// current holder, in rank order (see standbysBut).
func StandbysOf(w WorkloadSnapshot) []string { return w.standbysBut(w.Holder) }

// Successor is the standby this provider's revocation of workload id would
// name now: the first member standing by that it sees alive (a counting
// heartbeat within Stale on a relay), else the first ranked standby; ""
// when it has no standby, or id is not tracked.
func (m *Machine) Successor(id string) string {
	w := m.byID[id]
	if w == nil {
		return ""
	}
	return m.successor(w.standbysBut(m.self))
}

// StandbyAlive reports whether anyone stands by for this provider's hold
// of workload id: a member of standbysBut(self) it sees alive. It is
// Successor(id) != "" without allocating, for status refreshes of every
// held workload.
func (m *Machine) StandbyAlive(id string) bool {
	w := m.byID[id]
	if w == nil {
		return false
	}
	for _, s := range w.Spec.Standbys {
		if s != m.self && m.alive(s) {
			return true
		}
	}
	return w.Spec.Primary != m.self && len(w.Spec.Standbys) > 0 && m.alive(w.Spec.Primary)
}

// successor is the first standby this provider still sees alive, else the
// first ranked one: a holder that resumes from a stall longer than stale
// sees nobody alive because it heard nothing, and naming nobody would leave
// the workload down until the holder retook it. Naming a standby that is
// really gone costs nothing (no claim follows, takeover by silence still
// does), and a named standby that is alive claims through the claim step
// before the revocation's deadline, as any successor does.
func (m *Machine) successor(standbys []string) string {
	for _, s := range standbys {
		if m.alive(s) {
			return s
		}
	}
	if len(standbys) > 0 {
		return standbys[0]
	}
	return ""
}

// alive reports whether provider s sent a counting heartbeat within Stale
// on at least one relay.
func (m *Machine) alive(s string) bool {
	i, ok := m.provIdx[s]
	if !ok {
		return false
	}
	for _, seen := range m.provs[i].Seen {
		if !seen.IsZero() && m.now.Sub(seen) < m.cfg.Stale {
			return true
		}
	}
	return false
}

// handOff appends the stop and then the revocation (rule 7).
func (m *Machine) handOff(w *WorkloadSnapshot, epoch uint64, reason string, out *[]Effect) {
	*out = append(*out, StopWorkload{ID: w.Spec.ID, Epoch: epoch, Reason: reason})
	standbys := w.standbysBut(m.self)
	if len(standbys) == 0 {
		return
	}
	*out = append(*out, PublishRevocation{
		ID: w.Spec.ID, Epoch: epoch, Successor: m.successor(standbys), Standbys: standbys, Reason: reason,
		QuorumAt: m.quorumAt(w),
	})
}

// evict fences the workload after quorum loss and hands it off (rule 7).
func (m *Machine) evict(w *WorkloadSnapshot, lost time.Time, out *[]Effect) {
	m.handOn(w, fmt.Sprintf("relay quorum lost at %s", lost.Format(time.RFC3339)), out)
}

// handedOn is what an eviction leaves this provider (the retake rule).
const handedOn = "handed on, this provider may take it back after takeover_after"

// handOn evicts the workload: stops it and hands it off; unlike a
// failure, the retake rule may bring it back here.
func (m *Machine) handOn(w *WorkloadSnapshot, reason string, out *[]Effect) {
	m.enter(w, StateEvicted, out)
	m.handOff(w, w.Epoch, reason, out)
}

// relayTimeout ends a holding that reached no relay quorum (Provisioning)
// or no relay sync (Syncing) within provision_timeout (rule 11). A
// workload quorum loss evicts (warm-standby, or evict_without_standby) is
// evicted, as a Live one would be: a relay outage just after a claim is
// not forever, and the retake rule may bring it back. One that quorum loss
// does not evict fails here for good, as before.
func (m *Machine) relayTimeout(w *WorkloadSnapshot, reason string, out *[]Effect) {
	if !m.evicting(w) {
		m.giveUp(w, reason, out)
		return
	}
	m.handOn(w, reason, out)
}

// giveUp fails the workload here for good, stopping it and handing it off.
func (m *Machine) giveUp(w *WorkloadSnapshot, reason string, out *[]Effect) {
	m.enter(w, StateFailed, out)
	m.handOff(w, w.Epoch, reason, out)
	*out = append(*out, Failed{ID: w.Spec.ID, Epoch: w.Epoch, Reason: reason})
}
