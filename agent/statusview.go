package agent

import (
	"provideragent/agent/backend"
	"provideragent/lease"
)

// WorkloadView renders one workload as /status and the CLI show it. self is
// this agent's hex key ("" when unknown: the CLI reading the database while
// the agent is down; Role is then left empty). Running is left false:
// only the backend knows (Status fills it).
//
// Standbys are the providers that can still take the workload over: the
// lease's standbys without the current holder. After a failover the
// promoted standby holds the workload and is no longer anyone's standby;
// a lease that named one standby then has none (NoStandby).
func WorkloadView(w lease.WorkloadSnapshot, self string) WorkloadStatus {
	ws := WorkloadStatus{
		ID: w.Spec.ID, State: string(w.State), Epoch: w.Epoch, Primary: w.Holder,
		Standbys: StandbysOf(w),
	}
	ws.NoStandby = len(ws.Standbys) == 0 && len(w.Spec.Standbys) > 0
	if self != "" {
		ws.Role = "standby"
		if w.Holder == self || w.State == lease.StatePromoting {
			ws.Role = "primary"
		}
	}
	return ws
}

// StandbysOf returns the lease's standbys that can still take w over: all
// but the current holder, in rank order.
func StandbysOf(w lease.WorkloadSnapshot) []string {
	out := make([]string, 0, len(w.Spec.Standbys))
	for _, s := range w.Spec.Standbys {
		if s != w.Holder {
			out = append(out, s)
		}
	}
	return out
}

// fillReasons sets the Reason of every failed or respawning workload of ws
// (Status' own copy of the rows) from its log file, when the backend keeps
// one.
func (a *Agent) fillReasons(ws []WorkloadStatus) {
	lp, ok := a.backend.(interface{ LogPath(id string) string })
	if !ok {
		return
	}
	for i, w := range ws {
		if NeedsReason(lease.State(w.State)) {
			ws[i].Reason = backend.ExitReason(lp.LogPath(w.ID))
		}
	}
}

// NeedsReason reports whether a workload in state st is shown with the
// reason its process last ended (backend.ExitReason): it failed, or it is
// being respawned.
func NeedsReason(st lease.State) bool {
	return st == lease.StateFailed || st == lease.StateRespawning
}
