package lease

import (
	"fmt"
	"time"
)

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
