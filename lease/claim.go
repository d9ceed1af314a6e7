package lease

import "time"

// rank is this provider's standby rank for w: its index among the members
// that stand by for the current holder (standbysBut: the standbys, then
// the former primary); the holder itself, retaking, ranks after them all.
// Ranks are distinct, so that claim-step retries stagger and two claimers
// never back off in step for ever.
func (m *Machine) rank(w *WorkloadSnapshot) int {
	others := w.standbysBut(w.Holder)
	for i, s := range others {
		if s == m.self {
			return i
		}
	}
	return len(others)
}

// settle is how long an unwithdrawn rival claim must stand before a standby
// assumes the rival won and follows it as holder: the rival's whole claim
// step (publish and read timeouts plus the relay delay) fits inside it.
func (m *Machine) settle() time.Duration {
	return 2*m.cfg.ClaimTimeout + m.cfg.RelayDelay
}

// adoptSettled follows the highest rival whose claim has stood for settle.
func (m *Machine) adoptSettled(w *WorkloadSnapshot, now time.Time) bool {
	best := -1
	for i, r := range w.Rivals {
		if r.Epoch > w.Epoch && !now.Before(r.SeenAt.Add(m.settle())) && (best < 0 || r.Epoch > w.Rivals[best].Epoch) {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	r := w.Rivals[best]
	m.follow(w, m.provider(r.Claimer), r.Epoch, now)
	return true
}

// activeRival reports whether another provider's active claim for an epoch
// at or above e is known.
func (w *WorkloadSnapshot) activeRival(e uint64) bool {
	for _, r := range w.Rivals {
		if r.Epoch >= e {
			return true
		}
	}
	return false
}

// takeoverDue is rule 8's takeover trigger: this standby can show, on at
// least N-M+1 relays, that the holder made no Live claim of the workload
// (listed at the current epoch, or any heartbeat for a peer that lists
// none) for TakeoverAfter (plus rank*RankStagger, so that standbys try
// in rank order), counted from the latest of the holder's last claim on the
// relay and the start of watching the holder, over one stretch of time in
// which this standby watched each of those relays' live streams
// (silenceShown): its own outage, restart, or a delivery it may have
// missed never passes for the holder's silence.
func (m *Machine) takeoverDue(w *WorkloadSnapshot, now time.Time) bool {
	holder := &m.provs[w.holder]
	wait := m.cfg.TakeoverAfter + time.Duration(w.rank)*m.cfg.RankStagger()
	shown, due := m.silenceShown(now, wait, func(r int) time.Time {
		return maxTime(maxTime(w.ClaimAt[r], holder.Unlisted[r]), w.WatchFrom)
	})
	// Claim times and stream starts only grow until follow or a
	// transition wakes the workload, so the takeover cannot fall due
	// before due: Tick may sleep the workload until then.
	w.wakeHint = due
	return shown
}

func (m *Machine) tickStandby(w *WorkloadSnapshot, now time.Time, out *[]Effect) {
	if len(w.Rivals) > 0 {
		m.adoptSettled(w, now)
		if w.activeRival(w.Epoch + 1) {
			return // someone else is in the claim step
		}
	}
	if !m.clockSuspect && !m.draining && m.claimSlot() && m.takeoverDue(w, now) {
		m.promote(w, TriggerTakeover, out)
	}
}

// promote enters the claim step for epoch+1 (rule 8).
func (m *Machine) promote(w *WorkloadSnapshot, trigger Trigger, out *[]Effect) {
	m.enter(w, StatePromoting, out)
	w.Trigger = trigger
	w.Target = w.Epoch + 1
	w.ClaimAttempt = 0
	w.RestoreHint = "" // a revocation's state_uri is set by ObserveRevocation
	w.Rivals = dropRivals(w.Rivals, w.Epoch)
	m.publishClaim(w, out)
}

// publishClaim publishes w's claim, or, with every slot of ClaimWindow
// taken, leaves it in the backoff phase due at once: each Tick tries again
// (after the backoff's checks), and the attempt counts once published.
func (m *Machine) publishClaim(w *WorkloadSnapshot, out *[]Effect) {
	if !m.claimSlot() {
		m.setPhase(w, PhaseBackoff)
		w.PhaseAt = m.now
		return
	}
	w.ClaimAttempt++
	m.setPhase(w, PhasePublishing)
	w.PhaseAt = m.now
	w.ClaimFrom = m.now
	*out = append(*out, PublishClaim{ID: w.Spec.ID, Epoch: w.Target})
}

// withdrawRetry replaces the claim with a withdrawn marker and schedules the
// next attempt after a backoff staggered by rank.
func (m *Machine) withdrawRetry(w *WorkloadSnapshot, out *[]Effect) {
	*out = append(*out, WithdrawClaim{ID: w.Spec.ID, Epoch: w.Target})
	m.setPhase(w, PhaseBackoff)
	w.PhaseAt = m.now.Add(m.cfg.ClaimBackoff(w.ClaimAttempt, w.rank))
}

// claimSlot reports whether a claim may be published now: fewer than
// ClaimWindow of this provider's claims wait for their publish's answer
// (always, with ClaimWindow 0). A claim step that finds no slot does not
// begin (takeover, retake: the rule is checked again at the next Tick) or
// waits in its backoff phase (a revocation's, a retry).
func (m *Machine) claimSlot() bool {
	return m.cfg.ClaimWindow <= 0 || m.publishing < m.cfg.ClaimWindow
}

// ClaimsAwaitingAnswer is the number of claims waiting for their
// publish's answer (ClaimPublished or the claim step's timeout), at most
// ClaimWindow: at the bound, further claim steps wait.
func (m *Machine) ClaimsAwaitingAnswer() int { return m.publishing }

// setPhase moves w to claim-step phase p, keeping the count of claims
// awaiting their publish's answer.
func (m *Machine) setPhase(w *WorkloadSnapshot, p ClaimPhase) {
	if w.Phase == PhasePublishing {
		m.publishing--
	}
	if p == PhasePublishing {
		m.publishing++
	}
	w.Phase = p
}

// abortClaim leaves the claim step because someone else holds or claims a
// higher epoch, withdrawing the claim if it may still be active.
func (m *Machine) abortClaim(w *WorkloadSnapshot, target uint64, out *[]Effect) {
	m.withdrawInFlight(w, target, out)
	m.enter(w, StateStandby, out)
}

// withdrawInFlight withdraws w's claim of target if one is published and
// not yet withdrawn (a claim step in its backoff withdrew it already).
func (m *Machine) withdrawInFlight(w *WorkloadSnapshot, target uint64, out *[]Effect) {
	if w.Phase == PhasePublishing || w.Phase == PhaseReading {
		*out = append(*out, WithdrawClaim{ID: w.Spec.ID, Epoch: target})
	}
}

func (m *Machine) tickPromoting(w *WorkloadSnapshot, now time.Time, out *[]Effect) {
	if m.revocationExpired(w, now) {
		m.abortClaim(w, w.Target, out) // the takeover rule decides from here
		return
	}
	switch w.Phase {
	case PhasePublishing, PhaseReading:
		if !now.Before(w.PhaseAt.Add(m.cfg.ClaimTimeout)) {
			m.withdrawRetry(w, out)
		}
	case PhaseBackoff:
		if now.Before(w.PhaseAt) {
			return
		}
		if m.adoptSettled(w, now) {
			m.enter(w, StateStandby, out)
			return
		}
		if w.Trigger == TriggerTakeover && (m.clockSuspect || !m.takeoverDue(w, now)) {
			m.enter(w, StateStandby, out) // the holder spoke again, or this clock cannot judge silence
			return
		}
		if w.Trigger == TriggerRetake && (m.clockSuspect || m.draining) {
			m.enter(w, StateEvicted, out)
			return
		}
		if m.draining {
			m.enter(w, StateStandby, out) // a draining node starts no claim
			return
		}
		m.publishClaim(w, out)
	}
}

// ClaimPublished feeds the outcome of a PublishClaim: how many relays
// answered OK true. With at least M, the machine asks to read the claims
// after RelayDelay (ReadClaims); with fewer it withdraws and retries later.
func (m *Machine) ClaimPublished(now time.Time, a ClaimAck) []Effect {
	w := m.byID[a.Workload]
	if w == nil || w.State != StatePromoting || w.Phase != PhasePublishing || a.Epoch != w.Target {
		return nil
	}
	m.clock(now)
	var out []Effect
	if a.Accepted < m.cfg.M {
		m.withdrawRetry(w, &out)
		return out
	}
	m.setPhase(w, PhaseReading)
	w.PhaseAt = m.now.Add(m.cfg.RelayDelay)
	out = append(out, ReadClaims{ID: w.Spec.ID, Epoch: w.Target, At: w.PhaseAt})
	return out
}

// ClaimsRead feeds the outcome of a ReadClaims. The workload starts here
// (Provisioning at the new epoch) only when at least N-M+1 relays were read
// and no other provider's active claim for the epoch was seen, neither in
// the read nor through ObserveClaim; otherwise the claim is withdrawn and
// retried after a backoff staggered by rank. A report earlier than the
// ReadClaims time is ignored. A claim step started by a revocation whose
// RevokeBy has passed is withdrawn instead and the standby waits for the
// takeover rule: the read may have come too late to see every rival.
func (m *Machine) ClaimsRead(now time.Time, r ClaimRead) []Effect {
	w := m.byID[r.Workload]
	if w == nil || w.State != StatePromoting || w.Phase != PhaseReading || r.Epoch != w.Target {
		return nil
	}
	now = m.clock(now)
	if now.Before(w.PhaseAt) {
		return nil
	}
	var out []Effect
	if m.revocationExpired(w, now) {
		m.abortClaim(w, w.Target, &out)
		return out
	}
	if r.Relays < m.cfg.ReadQuorum() || r.Competing > 0 || w.activeRival(w.Target) {
		m.withdrawRetry(w, &out)
		return out
	}
	target, from := w.Target, w.ClaimFrom
	w.holder, w.Holder, w.Epoch = m.selfIdx, m.self, target
	w.rank = m.rank(w)
	w.HoldFrom = from
	w.Attempts, w.Reported, w.Revoked, w.HealthySince = 0, false, false, time.Time{}
	w.Rivals = nil
	clear(w.ClaimAt)
	m.enter(w, StateProvisioning, &out)
	m.beginEpoch(w, w.RestoreHint, &out)
	out = append(out, AnnouncePromotion{ID: w.Spec.ID, Epoch: target})
	return out
}

// revocationExpired reports whether w's claim step was started by a
// revocation whose deadline (RevokeBy, see RevocationDeadline) has passed.
func (m *Machine) revocationExpired(w *WorkloadSnapshot, now time.Time) bool {
	return w.Trigger == TriggerRevocation && !now.Before(w.RevokeBy)
}

// retakeDue is the retake rule (TriggerRetake): a provider that evicted
// itself takes the workload back through the claim step once it can show,
// on at least N-M+1 relays, TakeoverAfter of watching since the eviction
// (and since the last heartbeat there of a provider holding the workload at
// a lower epoch: heardLowerHolder) without the workload leaving Evicted
// (silenceShown): any claim or heartbeat of a higher epoch fences it for
// good, and a standby that had claimed the next epoch would have been seen
// on one of those relays by quorum intersection. Standbys that claim at the
// same time meet it in the claim step.
func (m *Machine) retakeDue(w *WorkloadSnapshot, now time.Time) bool {
	shown, _ := m.silenceShown(now, m.cfg.TakeoverAfter, func(r int) time.Time {
		return maxTime(w.Since, w.ClaimAt[r])
	})
	return shown
}
