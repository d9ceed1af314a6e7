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
		if w.Holder == m.self && !m.awaitingSync && !m.clockSuspect && len(w.Rivals) == 0 && m.retakeDue(w, now, self) {
			m.promote(w, TriggerRetake, out)
		}
	case w.State == StateStandby:
		w.wakeHint = time.Time{}
		m.tickStandby(w, now, out)
	case w.State == StatePromoting:
		m.tickPromoting(w, now, out)
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
	case StateFenced, StateFailed, StateExpired:
		return never
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
		switch {
		case has:
			m.becomeLive(w, out)
		case evictDue:
			m.evict(w, lost, out)
		case !now.Before(w.Since.Add(m.cfg.ProvisionTimeout)):
			m.giveUp(w, fmt.Sprintf("provision timeout: no relay quorum within %v", m.cfg.ProvisionTimeout), out)
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
			m.giveUp(w, fmt.Sprintf("relay sync timeout: fewer than %d relays synced within %v", m.cfg.M, m.cfg.ProvisionTimeout), out)
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

// standbysBut returns the standbys other than the holder, in rank order.
func (w *WorkloadSnapshot) standbysBut(holder string) []string {
	var out []string
	for _, s := range w.Spec.Standbys {
		if s != holder {
			out = append(out, s)
		}
	}
	return out
}

// successor is the first standby this provider still sees alive: a counting
// heartbeat within Stale on at least one relay.
func (m *Machine) successor(standbys []string) string {
	for _, s := range standbys {
		i, ok := m.provIdx[s]
		if !ok {
			continue
		}
		for _, seen := range m.provs[i].Seen {
			if !seen.IsZero() && m.now.Sub(seen) < m.cfg.Stale {
				return s
			}
		}
	}
	return ""
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
	})
}

// evict fences the workload after quorum loss and hands it off (rule 7).
func (m *Machine) evict(w *WorkloadSnapshot, lost time.Time, out *[]Effect) {
	m.enter(w, StateEvicted, out)
	m.handOff(w, w.Epoch, fmt.Sprintf("relay quorum lost at %s", lost.Format(time.RFC3339)), out)
}

// giveUp fails the workload here for good, stopping it and handing it off.
func (m *Machine) giveUp(w *WorkloadSnapshot, reason string, out *[]Effect) {
	m.enter(w, StateFailed, out)
	m.handOff(w, w.Epoch, reason, out)
	*out = append(*out, Failed{ID: w.Spec.ID, Epoch: w.Epoch, Reason: reason})
}

// ProcessExited feeds the exit of the workload process started for an epoch.
// The restart policy applies (rule 6): never fails the workload; on-failure
// schedules a respawn with backoff until MaxAttempts in a row are used
// (rule 5). Exits of other epochs, or outside Provisioning, Live and Suspect,
// are ignored.
func (m *Machine) ProcessExited(now time.Time, pe ProcessExit) []Effect {
	w := m.byID[pe.Workload]
	if w == nil || pe.Epoch != w.Epoch {
		return nil
	}
	switch w.State {
	case StateProvisioning, StateLive, StateSuspect:
	default:
		return nil
	}
	now = m.clock(now)
	if w.State == StateLive && w.Attempts > 0 && !now.Before(w.HealthySince.Add(m.cfg.RestartResetAfter)) {
		w.Attempts = 0
	}
	var out []Effect
	pol := w.Spec.RestartPolicy
	if pol.Policy != RestartOnFailure {
		m.giveUp(w, fmt.Sprintf("process exited (%s); restart policy never", pe.Reason), &out)
		return out
	}
	if w.Attempts >= pol.MaxAttempts {
		m.giveUp(w, fmt.Sprintf("process exited (%s); %d respawn attempts exhausted", pe.Reason, w.Attempts), &out)
		return out
	}
	m.enter(w, StateRespawning, &out)
	m.scheduleRespawn(w, &out)
	return out
}

// scheduleRespawn schedules the next respawn attempt after its backoff. The
// AttemptRespawn is emitted only when it falls due (respawnIfDue).
func (m *Machine) scheduleRespawn(w *WorkloadSnapshot, out *[]Effect) {
	w.Attempts++
	w.RespawnAt = m.now.Add(m.cfg.RestartBackoff(w.Attempts))
	w.RespawnIssued = false
	m.touch(w)
	m.respawnIfDue(w, out)
}

// respawnIfDue emits the AttemptRespawn of a Respawning workload once it is
// due, at most once per attempt, and never while a restored machine awaits
// relay sync (rule 10): the driver performs it at once.
func (m *Machine) respawnIfDue(w *WorkloadSnapshot, out *[]Effect) {
	if w.State != StateRespawning || w.RespawnIssued || m.awaitingSync || m.now.Before(w.RespawnAt) {
		return
	}
	w.RespawnIssued = true
	*out = append(*out, AttemptRespawn{ID: w.Spec.ID, Epoch: w.Epoch, Attempt: w.Attempts, At: w.RespawnAt})
}

// RespawnDone feeds the result of an AttemptRespawn. It is accepted only in
// Respawning and for the latest attempt, once issued (rule 5); success returns the workload
// to Live (Syncing while awaiting relay sync), or to Provisioning when it
// never was Live at this epoch, so that rule 11 still bounds it. A failure
// schedules the next attempt or, when the policy is exhausted, fails the
// workload.
func (m *Machine) RespawnDone(now time.Time, r RespawnResult) []Effect {
	w := m.byID[r.Workload]
	if w == nil || w.State != StateRespawning || r.Attempt != w.Attempts || !w.RespawnIssued {
		return nil
	}
	m.clock(now)
	var out []Effect
	w.RespawnAt, w.RespawnIssued = time.Time{}, false
	if r.OK {
		if w.HealthySince.IsZero() {
			m.enter(w, StateProvisioning, &out)
			return out
		}
		m.becomeLive(w, &out)
		return out
	}
	if w.Attempts >= w.Spec.RestartPolicy.MaxAttempts {
		m.giveUp(w, fmt.Sprintf("respawn failed (%s); %d respawn attempts exhausted", r.Reason, w.Attempts), &out)
		return out
	}
	m.scheduleRespawn(w, &out)
	return out
}

// RelaySynced reports that a relay delivered EOSE for this provider's
// subscriptions after a restart (rule 10). The driver first feeds every event
// the relay returned (claims, heartbeats, revocations), so that a higher
// epoch fences before the sync completes. Once M relays synced, Syncing
// workloads resume the state they had and are started again (idempotent),
// an AttemptRespawn issued before the restart and not yet reported is
// issued again (idempotent), and respawns that fell due during the sync are
// issued by the next Tick.
func (m *Machine) RelaySynced(now time.Time, relay string) []Effect {
	if !m.awaitingSync {
		return nil
	}
	ri, ok := m.RelayIndex(relay)
	if !ok {
		return nil
	}
	m.clock(now)
	m.synced[ri] = true
	n := 0
	for _, s := range m.synced {
		if s {
			n++
		}
	}
	if n < m.cfg.M {
		return nil
	}
	m.awaitingSync = false
	m.synced = nil
	var out []Effect
	for _, w := range m.list {
		m.touch(w) // respawns may be due now
		if w.State == StateRespawning && w.RespawnIssued {
			out = append(out, AttemptRespawn{ID: w.Spec.ID, Epoch: w.Epoch, Attempt: w.Attempts, At: w.RespawnAt})
		}
		if w.State != StateSyncing {
			continue
		}
		since := w.ResumeSince
		m.enter(w, w.Resume, &out)
		w.Since = since
		out = append(out, StartWorkload{ID: w.Spec.ID, Epoch: w.Epoch})
	}
	return out
}

// Outstanding returns the requests a restarted driver must re-issue because
// their feedback is still awaited: PublishClaim or ReadClaims for Promoting
// workloads, and AttemptRespawn for Respawning ones whose attempt was issued
// — but never while awaiting relay sync (rule 10): right after Restore it
// returns no AttemptRespawn, and RelaySynced re-issues them once M relays
// synced. It changes nothing.
func (m *Machine) Outstanding() []Effect {
	var out []Effect
	for _, w := range m.list {
		switch {
		case w.State == StateRespawning:
			if w.RespawnIssued && !m.awaitingSync {
				out = append(out, AttemptRespawn{ID: w.Spec.ID, Epoch: w.Epoch, Attempt: w.Attempts, At: w.RespawnAt})
			}
		case w.State == StatePromoting && w.Phase == PhasePublishing:
			out = append(out, PublishClaim{ID: w.Spec.ID, Epoch: w.Target})
		case w.State == StatePromoting && w.Phase == PhaseReading:
			out = append(out, ReadClaims{ID: w.Spec.ID, Epoch: w.Target, At: w.PhaseAt})
		}
	}
	return out
}

// SetClockSuspect tells the machine whether the driver finds this provider's
// clock outside the bound the single-writer guarantee rests on (offset from
// the relays' and other signers' time beyond MaxSkew/2): why says how, for
// logs and revocations. While it is suspect the machine trusts no timer of
// its own: it never enters the claim step by takeover (silence measured on a
// wrong clock is no evidence), withdraws a takeover claim in progress, and
// evicts every held workload that has a standby (stop, then a revocation
// naming a successor) at the next Tick, because the other providers cannot
// judge this provider's heartbeats either. A revocation naming this
// provider still starts the claim step: it is the holder's own word.
// Workloads without a standby keep running (nobody else may run them). The
// flag is persisted.
func (m *Machine) SetClockSuspect(now time.Time, suspect bool, why string) []Effect {
	m.clock(now)
	if !suspect {
		why = ""
	}
	if suspect == m.clockSuspect && why == m.clockWhy {
		return nil
	}
	m.clockSuspect, m.clockWhy = suspect, why
	var out []Effect
	for _, w := range m.list {
		m.touch(w)
		if suspect && w.State == StatePromoting && w.Trigger == TriggerTakeover {
			m.abortClaim(w, w.Target, &out)
		}
	}
	return out
}

// ClockSuspect reports whether the driver last said this provider's clock is
// outside the bound (SetClockSuspect), and why.
func (m *Machine) ClockSuspect() (bool, string) { return m.clockSuspect, m.clockWhy }

// retakeDue is the retake rule (TriggerRetake): a provider that evicted
// itself takes the workload back through the claim step once, on at least
// N-M+1 relays on which its own heartbeats come back, it has watched for
// TakeoverAfter since the eviction (and since the start of its unbroken
// stretch there) without the workload leaving Evicted: any claim or
// heartbeat of a higher epoch fences it for good, and a standby that had
// claimed the next epoch would have been seen on one of those relays by
// quorum intersection. Standbys that claim at the same time meet it in the
// claim step.
func (m *Machine) retakeDue(w *WorkloadSnapshot, now time.Time, self *ProviderSnapshot) bool {
	count := 0
	for r := range m.relays {
		seen := self.Seen[r]
		if seen.IsZero() || now.Sub(seen) > m.watchGap() {
			continue
		}
		if !now.Before(maxTime(w.Since, self.Stretch[r]).Add(m.cfg.TakeoverAfter)) {
			count++
		}
	}
	return count >= m.cfg.ReadQuorum()
}
