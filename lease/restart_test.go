package lease

import (
	"fmt"
	"testing"
	"time"
)

// Tests of the restart and respawn protocol: the effects a driver performs
// at once must never act on a decision the machine has since changed, and a
// restart must not lose a stop.

// respawns returns the AttemptRespawn effects in effs.
func respawns(effs []Effect) []AttemptRespawn {
	var out []AttemptRespawn
	for _, e := range effs {
		if a, ok := e.(AttemptRespawn); ok {
			out = append(out, a)
		}
	}
	return out
}

func TestRestoreReissuesStopForUnheldWorkloads(t *testing.T) {
	cfg := testConfig()
	lost := 300*s + cfg.Stale // liveAlice's last heartbeat expires
	tests := []struct {
		name  string
		setup func(t *testing.T) *harness
		want  State
		stop  bool
	}{
		{"evicted", func(t *testing.T) *harness {
			h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
			h.tick(lost + cfg.T1 + cfg.T2)
			return h
		}, StateEvicted, true},
		{"fenced", func(t *testing.T) *harness {
			h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
			h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
			return h
		}, StateFenced, true},
		{"failed", func(t *testing.T) *harness {
			// (With a standby, the provision timeout evicts instead.)
			h := newHarness(t, "alice", nil)
			h.track(0, warmSpec("w1", "alice"))
			h.tick(cfg.ProvisionTimeout)
			return h
		}, StateFailed, true},
		{"expired", func(t *testing.T) *harness {
			spec := warmSpec("w1", "alice", "bob")
			spec.ExpiresAt = at(600 * s)
			h := liveAlice(t, spec, 300*s, nil)
			h.tick(600 * s)
			return h
		}, StateExpired, true},
		{"standby", func(t *testing.T) *harness {
			h := newHarness(t, "bob", nil)
			h.track(0, warmSpec("w1", "alice", "bob"))
			return h
		}, StateStandby, true},
		{"promoting", func(t *testing.T) *harness {
			h := newHarness(t, "bob", nil)
			h.track(0, warmSpec("w1", "alice", "bob"))
			h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
			return h
		}, StatePromoting, true},
		{"live (held: resumes after sync)", func(t *testing.T) *harness {
			return liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		}, StateSyncing, false},
		{"provisioning (held)", func(t *testing.T) *harness {
			h := newHarness(t, "alice", nil)
			h.track(0, warmSpec("w1", "alice", "bob"))
			return h
		}, StateProvisioning, false},
		{"respawning (held)", func(t *testing.T) *harness {
			h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
			h.m.ProcessExited(at(301*s), ProcessExit{Workload: "w1", Epoch: 1})
			return h
		}, StateRespawning, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.setup(t)
			before := h.state("w1")
			effs := restoreJSON(t, h, h.m.Now().Sub(t0)+time.Second)
			h.wantState("w1", tt.want)
			stopped := len(effs) > 0 && hasEffect[StopWorkload](effs[:1])
			if stopped != tt.stop || (tt.stop && len(effs) != 1) {
				t.Fatalf("Restore(%v) = %v, want a stop first and alone: %v", before, render(effs), tt.stop)
			}
			if tt.stop {
				want := fmt.Sprintf("restart: not held here (%s)", before)
				if st := effs[0].(StopWorkload); st.ID != "w1" || st.Reason != want {
					t.Fatalf("Restore(%v) = %v, want a stop of w1 with reason %q", before, st, want)
				}
			}
			if len(effs) > 1 && hasEffect[StopWorkload](effs[1:]) {
				t.Fatalf("Restore(%v) = %v, want at most one stop", before, render(effs))
			}
		})
	}

	t.Run("stops come before anything else", func(t *testing.T) {
		h := newHarness(t, "alice", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.track(0, warmSpec("w2", "bob", "alice"))
		h.track(0, warmSpec("w3", "alice", "carol"))
		h.beat("alice", 0, 120*s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}, {ID: "w3", Epoch: 1}})
		h.m.ObserveClaim(at(121*s), PromotionClaim{Workload: "w3", Claimer: key("carol"), Epoch: 2, Active: true})
		h.wantEffects("Restore", restoreJSON(t, h, 130*s),
			`stop w2 epoch=1 reason="restart: not held here (standby)"`,
			`stop w3 epoch=1 reason="restart: not held here (fenced)"`,
			"entered w1 live -> syncing epoch=1")
		h.wantEffects("Outstanding", h.m.Outstanding())
	})
}

func TestRespawnEmittedOnlyWhenDue(t *testing.T) {
	tests := []struct {
		name    string
		others  int           // other live workloads (they sleep in Tick)
		preTick time.Duration // a Tick after the exit, before due (lets w1 sleep)
		late    time.Duration // how long after due the next Tick comes
	}{
		{"tick exactly at due", 0, 0, 0},
		{"tick late", 0, 0, 7 * s},
		{"among sleeping workloads", 200, 2 * s, 0},
		{"among sleeping workloads, late", 200, 2 * s, 90 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "alice", nil)
			list := []WorkloadEpoch{{ID: "w1", Epoch: 1}}
			h.track(0, warmSpec("w1", "alice", "bob"))
			for i := 0; i < tt.others; i++ {
				id := fmt.Sprintf("o%d", i)
				h.track(0, warmSpec(id, "alice", "bob"))
				list = append(list, WorkloadEpoch{ID: id, Epoch: 1})
			}
			h.beat("alice", 0, 300*s, 60*s, list)
			cfg := h.m.Config()
			exit := 301 * s
			h.wantEffects("ProcessExited", h.m.ProcessExited(at(exit), ProcessExit{Workload: "w1", Epoch: 1}),
				"entered w1 live -> respawning epoch=1")
			due := exit + cfg.RestartBackoff(1)
			if tt.preTick > 0 {
				h.wantEffects("Tick(after exit)", h.tick(exit+tt.preTick))
				if w := h.m.byID["w1"]; h.m.wake[w.idx] != at(due).UnixNano() {
					t.Fatalf("wake(w1) = %v, want it to sleep until the respawn is due at %v", time.Unix(0, h.m.wake[w.idx]).UTC(), at(due))
				}
			}
			h.wantEffects("Tick(due-1ns)", h.tick(due-1))
			effs := h.tick(due + tt.late)
			rs := respawns(effs)
			if len(rs) != 1 || len(effs) != 1 {
				t.Fatalf("Tick(due+%v) = %v, want one AttemptRespawn", tt.late, render(effs))
			}
			if r := rs[0]; r.ID != "w1" || r.Attempt != 1 || r.Epoch != 1 || !r.At.Equal(at(due)) {
				t.Fatalf("Tick(due+%v) = %v, want attempt 1 of w1 at %v", tt.late, r, at(due))
			}
			h.wantEffects("Tick(issued)", h.tick(due+tt.late+s))
			// A failure schedules attempt 2; it too is emitted only when due.
			now := due + tt.late + s
			h.wantEffects("RespawnDone(fail)", h.m.RespawnDone(at(now), RespawnResult{Workload: "w1", Attempt: 1, Reason: "boom"}))
			due2 := now + cfg.RestartBackoff(2)
			h.wantEffects("Tick(before attempt 2)", h.tick(due2-1))
			h.wantEffects("Tick(attempt 2 due)", h.tick(due2), fmt.Sprintf("respawn w1 epoch=1 attempt=2 at=+%v", due2))
			h.wantEffects("RespawnDone(ok)", h.m.RespawnDone(at(due2), RespawnResult{Workload: "w1", Attempt: 2, OK: true}),
				"entered w1 respawning -> live epoch=1")
		})
	}
}

func TestRespawnNotBeforeRelaySync(t *testing.T) {
	cfg := testConfig()
	exit := 301 * s
	due := exit + cfg.RestartBackoff(1)
	tests := []struct {
		name      string
		issued    bool          // AttemptRespawn was emitted before the crash
		restoreAt time.Duration // when the agent comes back
		syncAt    time.Duration // when M relays have synced
		// effects of the RelaySynced that completes the sync, and of the
		// Tick right after it
		wantSync, wantTick []string
	}{
		{"issued before the crash, report lost", true, due + s, due + 60*s,
			[]string{fmt.Sprintf("respawn w1 epoch=1 attempt=1 at=+%v", due)}, nil},
		{"due during the sync", false, exit + s, due + 60*s,
			nil, []string{fmt.Sprintf("respawn w1 epoch=1 attempt=1 at=+%v", due)}},
		{"already due at the restart", false, due + 30*s, due + 60*s,
			nil, []string{fmt.Sprintf("respawn w1 epoch=1 attempt=1 at=+%v", due)}},
		{"synced before due", false, exit + s, exit + 2*s, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
			h.m.ProcessExited(at(exit), ProcessExit{Workload: "w1", Epoch: 1})
			if tt.issued {
				if rs := respawns(h.tick(due)); len(rs) != 1 {
					t.Fatalf("Tick(due) = %v, want one AttemptRespawn", rs)
				}
			}
			h.wantEffects("Restore", restoreJSON(t, h, tt.restoreAt))
			h.wantEffects("Outstanding(after Restore)", h.m.Outstanding())
			// Time passes while awaiting sync; heartbeats keep quorum.
			for d := tt.restoreAt; d < tt.syncAt; d += 10 * s {
				if effs := append(h.hb(d, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}}), h.tick(d)...); hasEffect[AttemptRespawn](effs) {
					t.Fatalf("Tick(+%v) while awaiting sync = %v, want no respawn", d, render(effs))
				}
			}
			if !tt.issued {
				// no attempt was issued: a report for it is refused
				h.wantEffects("RespawnDone(not issued)", h.m.RespawnDone(at(tt.syncAt), RespawnResult{Workload: "w1", Attempt: 1, OK: true}))
			}
			h.wantEffects("RelaySynced(r1)", h.m.RelaySynced(at(tt.syncAt), "wss://r1.test"))
			h.wantEffects("RelaySynced(r2)", h.m.RelaySynced(at(tt.syncAt), "wss://r2.test"), tt.wantSync...)
			h.wantEffects("Tick(synced)", h.tick(tt.syncAt), tt.wantTick...)
		})
	}
	t.Run("issued before the crash, re-issued once synced", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		h.m.ProcessExited(at(exit), ProcessExit{Workload: "w1", Epoch: 1})
		h.tick(due)
		h.wantEffects("Restore", restoreJSON(t, h, due+s))
		h.wantEffects("Outstanding(awaiting sync)", h.m.Outstanding())
		h.wantEffects("Tick(awaiting sync)", h.tick(due+20*s))
		h.wantEffects("RelaySynced(r3)", h.m.RelaySynced(at(due+30*s), "wss://r3.test"))
		want := fmt.Sprintf("respawn w1 epoch=1 attempt=1 at=+%v", due)
		h.wantEffects("RelaySynced(r1)", h.m.RelaySynced(at(due+31*s), "wss://r1.test"), want)
		h.wantEffects("Tick(synced)", h.tick(due+32*s))
		h.wantEffects("Outstanding(synced)", h.m.Outstanding(), want)
		h.wantEffects("RespawnDone", h.m.RespawnDone(at(due+33*s), RespawnResult{Workload: "w1", Attempt: 1, OK: true}),
			"entered w1 respawning -> live epoch=1")
		h.wantEffects("Outstanding(done)", h.m.Outstanding())
	})
}

func TestNoRespawnAfterEviction(t *testing.T) {
	cfg := testConfig()
	evictAt := 300*s + cfg.Stale + cfg.T1 + cfg.T2 // liveAlice's heartbeats end at 300 s
	tests := []struct {
		name   string
		exit   time.Duration // the process exits
		issue  bool          // a Tick issues the respawn before the change of mind
		change func(h *harness) []Effect
		want   State
		later  State // an hour later ("" = want)
	}{
		{"evicted before due", evictAt - 2*s, false, func(h *harness) []Effect { return h.tick(evictAt) }, StateEvicted, ""},
		{"fenced by a claim before due (bob's standby once the claim settled)", evictAt - 2*s, false, func(h *harness) []Effect {
			return h.m.ObserveClaim(at(evictAt-s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
		}, StateFenced, StateStandby},
		{"fenced by a heartbeat before due (it rejoins as bob's standby)", evictAt - 2*s, false, func(h *harness) []Effect {
			return h.hb(evictAt-s, "bob", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		}, StateStandby, ""},
		{"issued, then evicted: the late report is refused", evictAt - 20*s, true, func(h *harness) []Effect { return h.tick(evictAt) }, StateEvicted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
			h.tick(tt.exit - s) // live -> suspect
			h.wantEffects("ProcessExited", h.m.ProcessExited(at(tt.exit), ProcessExit{Workload: "w1", Epoch: 1}),
				"entered w1 suspect -> respawning epoch=1")
			due := tt.exit + cfg.RestartBackoff(1)
			if tt.issue {
				if rs := respawns(h.tick(due)); len(rs) != 1 {
					t.Fatalf("Tick(due) = %v, want one AttemptRespawn", rs)
				}
			}
			effs := tt.change(h)
			h.wantState("w1", tt.want)
			if !hasEffect[StopWorkload](effs) {
				t.Fatalf("change of mind = %v, want a stop", render(effs))
			}
			for _, d := range []time.Duration{due, due + s, due + time.Hour} {
				if effs := h.tick(d); hasEffect[AttemptRespawn](effs) || hasEffect[StartWorkload](effs) {
					t.Fatalf("Tick(+%v) = %v, want no respawn after %v", d, render(effs), tt.want)
				}
			}
			h.wantEffects("RespawnDone(ok)", h.m.RespawnDone(at(due+2*s), RespawnResult{Workload: "w1", Attempt: 1, OK: true}))
			if tt.later == "" {
				tt.later = tt.want
			}
			h.wantState("w1", tt.later)
			h.wantEffects("Outstanding", h.m.Outstanding())
			if w, _ := h.m.Workload("w1"); !w.RespawnAt.IsZero() || w.RespawnIssued {
				t.Fatalf("Workload(w1) respawn_at = %v issued = %v, want the respawn cancelled", w.RespawnAt, w.RespawnIssued)
			}
		})
	}
}

// TestRestoredProvisioningStartsAfterSync: a holder restored before its
// workload reached quorum (Provisioning) lost its process with the agent;
// the sync's last RelaySynced starts it again, as it resumes Syncing ones,
// so that reaching quorum afterwards does not make it Live without a
// process (a kill -9 of run in its first second left it so).
func TestRestoredProvisioningStartsAfterSync(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.wantState("w1", StateProvisioning)
	m, effs, err := Restore(at(2*s), h.m.Config(), h.m.Snapshot())
	if err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	h.wantEffects("Restore", effs)
	h.m = m
	h.wantEffects("RelaySynced(r1)", h.m.RelaySynced(at(3*s), "wss://r1.test"))
	h.wantEffects("RelaySynced(r2)", h.m.RelaySynced(at(3*s), "wss://r2.test"), "start w1 epoch=1")
	h.hb(4*s, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	h.wantEffects("Tick(quorum)", h.tick(4*s), "entered w1 provisioning -> live epoch=1")
}
