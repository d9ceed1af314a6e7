package agent

import (
	"maps"
	"slices"
	"time"

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
		Standbys: lease.StandbysOf(w), Restore: string(w.Restore), RestoreWhy: w.RestoreWhy,
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

// Status returns the latest status document (refreshed every second), with
// the relay connections as they are now: Synced needs at least M relays
// connected that delivered EOSE on their current connection.
func (a *Agent) Status() Status {
	var s Status
	var watch []lease.RelayWatch
	a.view.with(func(v *statusView) {
		s = v.status
		// The rows are updated in place by refreshStatus: copy them.
		s.Workloads = slices.Clone(s.Workloads)
		watch = v.watch // replaced, never changed in place
	})
	for i := range s.Workloads {
		w := &s.Workloads[i]
		w.Running = a.work.backend.Running(w.ID)
		if w.Primary == a.me.self {
			w.Checkpoint = a.ckpt.heldStateURI(w.ID, w.Epoch)
		}
	}
	s.Relays = a.pool.Status()
	for i := range s.Relays {
		r := &s.Relays[i]
		url := canonicalRelay(r.URL)
		for _, w := range watch {
			if w.Relay == url {
				r.WatchedSince, r.SilenceShownUntil = w.Since, w.ShownUntil
			}
		}
	}
	s.Version = a.me.version
	synced := 0
	for _, r := range s.Relays {
		if r.Connected && r.EOSE {
			synced++
		}
	}
	s.Synced = s.Synced && synced >= a.cfg.Lease.M
	a.fillReasons(s.Workloads)
	return s
}

// publishHeld publishes the (workload, epoch) pairs held, for heartbeats.
// The machine goroutine calls it on ticks after transitions (beat.dirty),
// so a mass transition rebuilds the list a few times a second at most.
func (a *Agent) publishHeld() {
	a.m.heldDirty = false
	held := a.machine().Held(nil) // a new slice: readers keep the one they loaded
	a.beat.held.Store(&held)
}

// statusRebuildEvery is how often refreshStatus rebuilds every row of the
// status document; between rebuilds it updates the rows of workloads that
// changed state (a standby's followed epoch may lag this long).
const statusRebuildEvery = 30 * time.Second

// refreshStatus updates the status document and the gauges (machine
// goroutine only): the rows of the workloads that changed state since the
// last refresh, every row every statusRebuildEvery.
func (a *Agent) refreshStatus(now time.Time) {
	a.m.status.refreshed, a.m.status.dirty = now, false
	a.ckpt.observeCheckpointAge(now)
	counts := a.machine().StateCounts(nil)
	for _, s := range lease.States {
		a.obs.met.workloads.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	a.obs.met.claimsWaiting.Set(float64(a.machine().ClaimsAwaitingAnswer()))
	sus, why := a.machine().ClockSuspect()
	var ws []WorkloadStatus
	a.view.with(func(v *statusView) {
		ws = a.refreshRows(v, now)
		v.status = Status{Provider: a.me.keys.Npub(), Source: "agent", Now: now, Synced: !a.machine().AwaitingSync(), Workloads: ws,
			ClockSuspect: sus, ClockWhy: why, Draining: a.machine().Draining(), Containment: a.work.containment.Summary, ContainmentWarning: a.work.containment.Warning,
			Isolation: a.work.isolation.Summary, IsolationWarning: a.work.isolation.Warning}
		v.counts = counts
		v.watch = a.machine().Watching()
	})
	// Whether a standby is alive changes without any state change: every
	// refresh sets it on every held row, and counts them. ws is written
	// only by the machine goroutine, this one: no lock needed to read it.
	noStandby := 0
	providers := map[string]bool{a.me.self: true}
	for i := range ws {
		providers[ws[i].Primary] = true
		if ws[i].NoStandby {
			noStandby++
		}
	}
	a.obs.met.noStandby.Set(float64(noStandby))
	for p := range providers { // quorum of this provider and of every holder it watches
		q := 0.0
		if a.machine().HasQuorum(now, p) {
			q = 1
		}
		a.obs.met.quorum.WithLabelValues(p).Set(q)
		if p == a.me.self {
			a.obs.met.ownQuorum.Set(q)
		}
	}
}

// statusRow is workload id's row as the machine holds it (false: not
// tracked). Status fills Running; refreshRows sets NoStandby and QuorumAt.
func (a *Agent) statusRow(id string) (WorkloadStatus, bool) {
	w, ok := a.machine().Workload(id)
	if !ok {
		return WorkloadStatus{}, false
	}
	return WorkloadView(w, a.me.self), true
}

// refreshRows updates the rows of v (under its lock, machine goroutine)
// and returns them: those of the workloads that changed state since the
// last refresh, or all of them every statusRebuildEvery; NoStandby and
// QuorumAt on every row.
func (a *Agent) refreshRows(v *statusView, now time.Time) []WorkloadStatus {
	ws := v.status.Workloads
	rebuild := v.idx == nil || now.Sub(a.m.status.built) >= statusRebuildEvery
	for id := range a.m.status.ids {
		_, listed := v.idx[id]
		if _, tracked := a.machine().State(id); listed && !tracked {
			rebuild = true // a removed workload: rebuild the list
			break
		}
	}
	if rebuild {
		ids := a.machine().IDs()
		ws = make([]WorkloadStatus, 0, len(ids))
		v.idx = make(map[string]int, len(ids))
		for _, id := range ids {
			if r, ok := a.statusRow(id); ok {
				v.idx[id] = len(ws)
				ws = append(ws, r)
			}
		}
		a.m.status.built = now
	} else {
		// New workloads are appended (the machine lists workloads in the
		// order they came, as a rebuild does): thousands of grants arriving
		// used to rebuild the whole list on every refresh.
		for id := range a.m.status.ids {
			r, ok := a.statusRow(id)
			if !ok {
				continue
			}
			if i, listed := v.idx[id]; listed {
				ws[i] = r
			} else {
				v.idx[id] = len(ws)
				ws = append(ws, r)
			}
		}
	}
	clear(a.m.status.ids)
	for i := range ws {
		w := &ws[i]
		w.NoStandby = w.Primary == a.me.self && lease.State(w.State).Holding() && len(w.Standbys) > 0 && !a.machine().StandbyAlive(w.ID)
		if w.Primary == a.me.self {
			w.QuorumAt = a.machine().QuorumAt(w.ID)
		}
	}
	return ws
}

// stateCounts are the workloads by state at the last status refresh.
func (a *Agent) stateCounts() (counts map[lease.State]int) {
	a.view.with(func(v *statusView) { counts = maps.Clone(v.counts) })
	return counts
}

// Track adds a lease grant directly (tests and the demo; operators use
// QueueGrant). It is safe to call while Run runs.
