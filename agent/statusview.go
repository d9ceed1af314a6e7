package agent

import (
	"provideragent/backend"
	"provideragent/lease"
)

// WorkloadView renders one workload as /status and the CLI show it. self is
// this agent's hex key ("" when unknown: the CLI reading the database while
// the agent is down; Role is then left empty). Running is left false:
// only the backend knows (Status fills it).
//
// Standbys are the members of the lease that stand by for the current
// holder (lease.StandbysOf): the lease's standbys without the holder, then
// the former primary, which rejoins as a standby after a failover.
// NoStandby (whether any of them is alive) needs the machine's relay
// tables: the agent sets it (Status).
func WorkloadView(w lease.WorkloadSnapshot, self string) WorkloadStatus {
	ws := WorkloadStatus{
		ID: w.Spec.ID, State: string(w.State), Epoch: w.Epoch, Primary: w.Holder,
		Standbys: lease.StandbysOf(w),
	}
	if self != "" {
		ws.Role = "standby"
		if w.Holder == self || w.State == lease.StatePromoting {
			ws.Role = "primary"
		}
	}
	return ws
}

// fillReasons sets the Reason of every failed or respawning workload of ws
// (Status' own copy of the rows) from its log file, when the backend keeps
// one.
func (a *Agent) fillReasons(ws []WorkloadStatus) {
	for i, w := range ws {
		if p := a.work.backend.LogPath(w.ID); p != "" && NeedsReason(lease.State(w.State)) {
			ws[i].Reason = backend.ExitReason(p)
		}
	}
}

// NeedsReason reports whether a workload in state st is shown with the
// reason its process last ended (backend.ExitReason): it failed, or it is
// being respawned.
func NeedsReason(st lease.State) bool {
	return st == lease.StateFailed || st == lease.StateRespawning
}
