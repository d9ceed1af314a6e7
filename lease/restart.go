package lease

import "time"

// RelaySynced reports that a relay delivered EOSE for this provider's
// subscriptions on a connection (every connection, and after every
// RelayGap): the driver first feeds every event the relay returned (claims,
// heartbeats, revocations), so that a higher epoch fences before the sync
// completes. From now on the relay's live stream is watched (relayWatch)
// until the next RelayGap.
//
// After a restart (rule 10): once M relays synced, Syncing
// workloads resume the state they had and are started again (idempotent),
// Provisioning ones (restored before they reached quorum) are started again,
// an AttemptRespawn issued before the restart and not yet reported is
// issued again (idempotent), and respawns that fell due during the sync are
// issued by the next Tick.
func (m *Machine) RelaySynced(now time.Time, relay string) []Effect {
	ri, ok := m.RelayIndex(relay)
	if !ok {
		return nil
	}
	now = m.clock(now)
	m.startWatch(ri, now)
	if !m.awaitingSync {
		return nil
	}
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
		if w.State == StateProvisioning {
			// Restored while provisioning: its process died with the
			// agent, and reaching quorum now would make it Live without a
			// start. One still restoring its state restores it again.
			if w.Restore.pending() {
				m.requestRestore(w, &out)
			} else {
				out = append(out, StartWorkload{ID: w.Spec.ID, Epoch: w.Epoch})
			}
			continue
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
// and RestoreCheckpoint for Provisioning ones restoring their state — but
// these two never while awaiting relay sync (rule 10): right after Restore
// it returns neither, and RelaySynced re-issues them once M relays
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
		case w.State == StateProvisioning && w.Restore == RestoreRunning && !m.awaitingSync:
			out = append(out, m.restoreRequest(w))
		}
	}
	return out
}
