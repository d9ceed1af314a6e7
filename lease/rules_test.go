package lease

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const s = time.Second

// liveAlice returns a machine of alice holding w1 Live from t=0, with
// heartbeats every 60 s on all relays up to last.
func liveAlice(t *testing.T, spec Spec, last time.Duration, mod func(*Config)) *harness {
	t.Helper()
	h := newHarness(t, "alice", mod)
	h.track(0, spec)
	h.beat("alice", 0, last, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: spec.Epoch}})
	h.wantState("w1", StateLive)
	return h
}

func TestRule1_T1DebouncesFromQuorumLoss(t *testing.T) {
	// Live for a long time (far more than T1), then the heartbeats stop.
	h := liveAlice(t, warmSpec("w1", "alice", "bob"), 3600*s, nil)
	cfg := h.m.Config()
	lost := 3600*s + cfg.Stale // the last heartbeat expires on all relays
	if got := h.m.QuorumUntil(key("alice")); !got.Equal(at(lost)) {
		t.Fatalf("QuorumUntil(alice) = %v, want %v", got, at(lost))
	}
	// The seed would turn Suspect at the first tick after quorum loss,
	// because it measured T1 from entering Live.
	h.wantEffects("Tick(lost)", h.tick(lost))
	h.wantEffects("Tick(lost+T1-1ns)", h.tick(lost+cfg.T1-1))
	h.wantEffects("Tick(lost+T1)", h.tick(lost+cfg.T1), "entered w1 live -> suspect epoch=1")
	h.wantEffects("Tick(lost+T1+T2-1ns)", h.tick(lost+cfg.T1+cfg.T2-1))
	effs := h.tick(lost + cfg.T1 + cfg.T2)
	if h.state("w1") != StateEvicted || !hasEffect[StopWorkload](effs) {
		t.Fatalf("Tick(lost+T1+T2) = %v, want eviction", render(effs))
	}
}

func TestRule1_QuorumRegainedRestartsDebounce(t *testing.T) {
	h := liveAlice(t, warmSpec("w1", "alice", "bob"), 600*s, nil)
	cfg := h.m.Config()
	lost := 600*s + cfg.Stale
	h.tick(lost + cfg.T1)
	h.wantState("w1", StateSuspect)
	// quorum comes back briefly: Live again, and a fresh loss is debounced
	// from the new loss moment.
	back := lost + cfg.T1 + 10*s
	h.hb(back, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	h.wantEffects("Tick(back)", h.tick(back), "entered w1 suspect -> live epoch=1")
	lost2 := back + cfg.Stale
	h.wantEffects("Tick(lost2+T1-1ns)", h.tick(lost2+cfg.T1-1))
	h.wantEffects("Tick(lost2+T1)", h.tick(lost2+cfg.T1), "entered w1 live -> suspect epoch=1")
}

func TestRule2_HealthyProviderNeverFlaps(t *testing.T) {
	tests := []struct {
		name      string
		tickEvery time.Duration
		relays    []int
	}{
		{"ticks between heartbeats, all relays", 7 * s, all3},
		{"ticks slower than heartbeats, two relays", 150 * s, []int{1, 3}},
		{"one tick per heartbeat, two relays", 60 * s, []int{2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "alice", nil)
			h.track(0, warmSpec("w1", "alice", "bob"))
			next := time.Duration(0)
			for d := time.Duration(0); d < 4*time.Hour; d += s {
				if d%(60*s) == 0 {
					h.hb(d, "alice", tt.relays, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
				}
				if d >= next {
					next += tt.tickEvery
					for _, e := range h.tick(d) {
						if es, ok := e.(EnteredState); !ok || es.To != StateLive || es.From != StateProvisioning {
							t.Fatalf("Tick(%v) = %v, want no change after Live", d, e)
						}
					}
				}
			}
			h.wantState("w1", StateLive)
		})
	}
}

func TestRule3_FutureAndReplayedHeartbeatsNeverCount(t *testing.T) {
	cfg := testConfig()
	type obs struct {
		created, received time.Duration
		relay             string
		provider          string
	}
	tests := []struct {
		name   string
		feed   []obs
		counts bool // whether the last observation refreshed r1
	}{
		{"fresh", []obs{{100 * s, 100 * s, "wss://r1.test", "alice"}}, true},
		{"skew within max_skew", []obs{{100*s + cfg.MaxSkew, 100 * s, "wss://r1.test", "alice"}}, true},
		{"from the future", []obs{{100*s + cfg.MaxSkew + s, 100 * s, "wss://r1.test", "alice"}}, false},
		{"stale created_at", []obs{{100*s - cfg.Stale - s, 100 * s, "wss://r1.test", "alice"}}, false},
		{"replayed later", []obs{{100 * s, 100 * s, "wss://r1.test", "alice"}, {100 * s, 150 * s, "wss://r1.test", "alice"}}, false},
		{"older re-served", []obs{{100 * s, 100 * s, "wss://r1.test", "alice"}, {90 * s, 150 * s, "wss://r1.test", "alice"}}, false},
		{"newer counts", []obs{{100 * s, 100 * s, "wss://r1.test", "alice"}, {140 * s, 150 * s, "wss://r1.test", "alice"}}, true},
		{"same event via another spelling", []obs{{100 * s, 100 * s, "wss://r1.test", "alice"}, {100 * s, 150 * s, "WSS://R1.test/", "alice"}}, false},
		{"unknown relay", []obs{{100 * s, 100 * s, "wss://evil.test", "alice"}}, false},
		{"provider not named", []obs{{100 * s, 100 * s, "wss://r1.test", "mallory"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "alice", nil)
			h.track(0, warmSpec("w1", "alice", "bob"))
			var want time.Time
			for i, o := range tt.feed {
				h.m.ObserveHeartbeat(at(o.received), Heartbeat{Provider: key(o.provider), Relay: o.relay, CreatedAt: at(o.created), ReceivedAt: at(o.received)})
				if i == len(tt.feed)-1 && tt.counts {
					want = at(o.received)
				}
				if i < len(tt.feed)-1 {
					want = at(o.received)
				}
			}
			i, ok := h.m.provIdx[key("alice")]
			if !ok {
				t.Fatalf("provider alice not registered")
			}
			if got := h.m.provs[i].Seen[0]; !got.Equal(want) {
				t.Fatalf("Seen[r1] after %v = %v, want %v", tt.feed, got, want)
			}
		})
	}
}

func TestRule4_SignerChecks(t *testing.T) {
	spec := warmSpec("w1", "alice", "bob", "carol")
	t.Run("revocation from a standby is ignored", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, spec)
		effs := h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("carol"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
		h.wantEffects("ObserveRevocation(carol)", effs)
		h.wantState("w1", StateStandby)
	})
	t.Run("revocation for another epoch is ignored", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, spec)
		effs := h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 2, Successor: key("bob"), QuorumAt: at(10 * s)})
		h.wantEffects("ObserveRevocation(epoch 2)", effs)
	})
	t.Run("revocation from the holder is accepted", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, spec)
		effs := h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
		h.wantEffects("ObserveRevocation(alice)", effs, "entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")
	})
	t.Run("claim from a provider the lease does not name does not fence", func(t *testing.T) {
		h := liveAlice(t, spec, 300*s, nil)
		effs := h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "w1", Claimer: key("mallory"), Epoch: 9, Active: true})
		h.wantEffects("ObserveClaim(mallory)", effs)
		effs = h.hb(301*s, "mallory", all3, []WorkloadEpoch{{ID: "w1", Epoch: 9}})
		h.wantEffects("ObserveHeartbeat(mallory)", effs)
		h.wantState("w1", StateLive)
	})
	t.Run("a lease not naming us is refused", func(t *testing.T) {
		h := newHarness(t, "dave", nil)
		if _, err := h.m.Track(at(0), spec); !errors.Is(err, ErrNotNamed) {
			t.Fatalf("Track(w1) = %v, want %v", err, ErrNotNamed)
		}
	})
}

func TestRule5_RespawnBackoffCountedAndEndsInFailed(t *testing.T) {
	h := liveAlice(t, warmSpec("w1", "alice"), 300*s, nil)
	cfg := h.m.Config()
	h.wantEffects("RespawnDone(live)", h.m.RespawnDone(at(301*s), RespawnResult{Workload: "w1", Attempt: 1, OK: true}))
	h.wantEffects("ProcessExited", h.m.ProcessExited(at(301*s), ProcessExit{Workload: "w1", Epoch: 1, Reason: "exit 1"}),
		"entered w1 live -> respawning epoch=1")
	h.wantEffects("RespawnDone(not issued yet)", h.m.RespawnDone(at(302*s), RespawnResult{Workload: "w1", Attempt: 1, OK: true}))
	h.wantEffects("Tick(before due)", h.tick(305*s))
	h.wantEffects("Tick(due)", h.tick(306*s), "respawn w1 epoch=1 attempt=1 at=+5m6s")
	h.wantEffects("Tick(issued)", h.tick(307*s))
	h.wantEffects("RespawnDone(stale attempt)", h.m.RespawnDone(at(307*s), RespawnResult{Workload: "w1", Attempt: 7, OK: true}))
	h.wantEffects("RespawnDone(fail 1)", h.m.RespawnDone(at(307*s), RespawnResult{Workload: "w1", Attempt: 1, Reason: "boom"}))
	h.wantEffects("Tick(attempt 2 due)", h.tick(317*s), "respawn w1 epoch=1 attempt=2 at=+5m17s")
	h.wantEffects("RespawnDone(fail 2)", h.m.RespawnDone(at(317*s), RespawnResult{Workload: "w1", Attempt: 2, Reason: "boom"}))
	h.wantEffects("Tick(attempt 3 due)", h.tick(337*s), "respawn w1 epoch=1 attempt=3 at=+5m37s")
	effs := h.m.RespawnDone(at(337*s), RespawnResult{Workload: "w1", Attempt: 3, Reason: "boom"})
	h.wantEffects("RespawnDone(fail 3)", effs,
		"entered w1 respawning -> failed epoch=1",
		`stop w1 epoch=1 reason="respawn failed (boom); 3 respawn attempts exhausted"`,
		`failed w1 epoch=1 reason="respawn failed (boom); 3 respawn attempts exhausted"`)
	h.wantEffects("RespawnDone(after failed)", h.m.RespawnDone(at(340*s), RespawnResult{Workload: "w1", Attempt: 3, OK: true}))

	t.Run("backoff caps and resets after a healthy period", func(t *testing.T) {
		spec := warmSpec("w1", "alice")
		spec.RestartPolicy.MaxAttempts = 10
		h := liveAlice(t, spec, 300*s, func(c *Config) { c.RestartMax = 20 * s })
		if got := cfg.RestartBackoff(10); got != cfg.RestartMax {
			t.Fatalf("RestartBackoff(10) = %v, want %v", got, cfg.RestartMax)
		}
		now := 301 * s
		var last AttemptRespawn
		h.m.ProcessExited(at(now), ProcessExit{Workload: "w1", Epoch: 1})
		prev := at(now) // when the previous attempt failed
		for i := 1; i <= 5; i++ {
			ws, _ := h.m.Workload("w1")
			effs := h.m.Tick(ws.RespawnAt)
			if len(effs) != 1 {
				t.Fatalf("Tick(attempt %d due) = %v, want one AttemptRespawn", i, render(effs))
			}
			if last = effs[0].(AttemptRespawn); last.Attempt != i || !last.At.Equal(ws.RespawnAt) {
				t.Fatalf("Tick(attempt %d due) = %v, want attempt %d at %v", i, last, i, ws.RespawnAt)
			}
			if i < 5 {
				prev = last.At
				h.m.RespawnDone(prev, RespawnResult{Workload: "w1", Attempt: i})
			}
		}
		if got := last.At.Sub(prev); got != 20*s {
			t.Fatalf("delay of attempt %d = %v, want the cap %v", last.Attempt, got, 20*s)
		}
		h.m.RespawnDone(last.At, RespawnResult{Workload: "w1", Attempt: last.Attempt, OK: true})
		h.wantState("w1", StateLive)
		// healthy for RestartResetAfter: the next exit starts at attempt 1.
		h.beat("alice", 460*s, 460*s+cfg.RestartResetAfter, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		h.m.ProcessExited(at(460*s+cfg.RestartResetAfter), ProcessExit{Workload: "w1", Epoch: 1})
		effs := h.tick(460*s + cfg.RestartResetAfter + cfg.RestartInitial)
		if a := effs[0].(AttemptRespawn); a.Attempt != 1 {
			t.Fatalf("ProcessExited after healthy period: attempt = %d, want 1", a.Attempt)
		}
	})
}

func TestRule6_RestartPolicyOnExitQuorumLossEvictsOnlyWarmStandby(t *testing.T) {
	tests := []struct {
		name       string
		spec       Spec
		evictOptIn bool
		wantState  State
		wantStop   bool
		wantRevoke bool
		wantReport bool
	}{
		{"none replication only reports", warmSpec("w1", "alice"), false, StateSuspect, false, false, true},
		{"checkpointed only reports", func() Spec { s := warmSpec("w1", "alice"); s.Replication = ReplicationCheckpointed; return s }(), false, StateSuspect, false, false, true},
		{"operator opt-in evicts without standby", warmSpec("w1", "alice"), true, StateEvicted, true, false, false},
		{"warm standby evicts and revokes", warmSpec("w1", "alice", "bob"), false, StateEvicted, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := liveAlice(t, tt.spec, 300*s, func(c *Config) { c.EvictWithoutStandby = tt.evictOptIn })
			var effs []Effect
			for d := 300 * s; d < 2*time.Hour; d += 10 * s {
				effs = append(effs, h.tick(d)...)
			}
			h.wantState("w1", tt.wantState)
			if got := hasEffect[StopWorkload](effs); got != tt.wantStop {
				t.Fatalf("stop in %v = %v, want %v", render(effs), got, tt.wantStop)
			}
			if got := hasEffect[PublishRevocation](effs); got != tt.wantRevoke {
				t.Fatalf("revocation in %v = %v, want %v", render(effs), got, tt.wantRevoke)
			}
			if got := hasEffect[QuorumReport](effs); got != tt.wantReport {
				t.Fatalf("quorum report in %v = %v, want %v", render(effs), got, tt.wantReport)
			}
		})
	}
	t.Run("process exit with policy never fails", func(t *testing.T) {
		spec := warmSpec("w1", "alice")
		spec.RestartPolicy = RestartPolicy{Policy: RestartNever}
		h := liveAlice(t, spec, 300*s, nil)
		effs := h.m.ProcessExited(at(301*s), ProcessExit{Workload: "w1", Epoch: 1, Reason: "exit 2"})
		h.wantEffects("ProcessExited", effs,
			"entered w1 live -> failed epoch=1",
			`stop w1 epoch=1 reason="process exited (exit 2); restart policy never"`,
			`failed w1 epoch=1 reason="process exited (exit 2); restart policy never"`)
	})
}

func TestRule7_EvictionStopsBeforeRevocation(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	// alice is healthy until 600 s; bob is never seen; carol is seen late.
	h.beat("alice", 0, 600*s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	cfg := h.m.Config()
	lost := 600*s + cfg.Stale
	h.hb(lost+cfg.T1+cfg.T2-60*s, "carol", []int{2}, []WorkloadEpoch{})
	effs := h.tick(lost + cfg.T1 + cfg.T2)
	h.wantEffects("Tick(eviction)", effs,
		"entered w1 live -> suspect epoch=1",
		"entered w1 suspect -> evicted epoch=1",
		`stop w1 epoch=1 reason="relay quorum lost at +13m0s"`,
		`revoke w1 epoch=1 successor=carol standbys=[bob,carol] quorum_at=+10m0s reason="relay quorum lost at +13m0s"`)
	h.wantState("w1", StateEvicted)
	// the successor's claim fences the evicted primary for good.
	effs = h.m.ObserveClaim(at(lost+cfg.T1+cfg.T2+s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: 2, Active: true})
	h.wantEffects("ObserveClaim(carol)", effs, "entered w1 evicted -> fenced epoch=1")
}

// claimStep drives a standby through the claim step with no competition.
func claimStep(h *harness, d time.Duration, epoch uint64) []Effect {
	var out []Effect
	out = append(out, h.m.ClaimPublished(at(d), ClaimAck{Workload: "w1", Epoch: epoch, Accepted: 2})...)
	rd := d + h.m.Config().RelayDelay
	out = append(out, h.m.ClaimsRead(at(rd), ClaimRead{Workload: "w1", Epoch: epoch, Relays: 2})...)
	return out
}

func TestRule8_HandoffByRevocation(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	effs := h.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(100 * s)})
	h.wantEffects("ObserveRevocation", effs, "entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")
	h.wantEffects("ClaimsRead(too early)", h.m.ClaimsRead(at(100*s), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3}))
	h.wantEffects("ClaimPublished", h.m.ClaimPublished(at(101*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 2}),
		"read-claims w1 epoch=2 at=+1m51s")
	h.wantEffects("ClaimsRead(before At)", h.m.ClaimsRead(at(110*s), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3}))
	h.wantEffects("ClaimsRead", h.m.ClaimsRead(at(111*s), ClaimRead{Workload: "w1", Epoch: 2, Relays: 2}),
		"entered w1 promoting -> provisioning epoch=2", "start w1 epoch=2", "announce w1 epoch=2")
	if got := h.m.Held(nil); len(got) != 1 || got[0] != (WorkloadEpoch{ID: "w1", Epoch: 2}) {
		t.Fatalf("Held() = %v, want [{w1 2}]", got)
	}
}

func TestRule8_TakeoverOnlyAfterSilenceSeenWhileHealthy(t *testing.T) {
	cfg := testConfig()
	t.Run("healthy standby takes over after takeover_after of silence", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		// alice claims w1 until 600 s; bob stays healthy throughout.
		for d := time.Duration(0); d <= 600*s; d += 60 * s {
			h.hb(d, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		}
		var took time.Duration
		for d := time.Duration(0); d <= 3600*s && took == 0; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				took = d
			}
		}
		if want := shownAt(0, 600*s+cfg.TakeoverAfter); took != want {
			t.Fatalf("takeover at %v, want %v (last claim + takeover_after)", took, want)
		}
	})
	t.Run("standby cut off from relays never takes over", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.hb(0, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		for d := time.Duration(0); d <= 6*3600*s; d += 10 * s {
			if d < 300*s && d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if effs := h.tick(d); len(effs) > 0 {
				t.Fatalf("Tick(%v) = %v, want nothing while cut off", d, render(effs))
			}
		}
	})
	t.Run("the standby's own outage is not the holder's silence", func(t *testing.T) {
		// bob is cut off from 100 s to 900 s (its driver reports each
		// relay's gap, and its EOSE once back); alice claims until 700 s
		// and then starts self-fencing. bob must count silence only from
		// 900 s.
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		var took time.Duration
		for d := time.Duration(0); d <= 3600*s && took == 0; d += s {
			switch d {
			case 100 * s:
				for _, r := range h.m.Relays() {
					h.m.RelayGap(at(d), r)
				}
			case 900 * s:
				h.syncAll(d)
			}
			if d%(60*s) == 0 && d <= 700*s && d >= 120*s {
				h.hb(d, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
			}
			if d%(60*s) == 0 && (d <= 100*s || d >= 900*s) {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				took = d
			}
		}
		if want := shownAt(900*s, 900*s+cfg.TakeoverAfter); took != want {
			t.Fatalf("takeover at %v, want %v (back online + takeover_after)", took, want)
		}
	})
	t.Run("silence on fewer than N-M+1 healthy relays is not enough", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		for d := time.Duration(0); d <= 6*3600*s; d += 60 * s {
			h.hb(d, "alice", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 1}}) // alice still claims on r1
			h.hb(d, "bob", []int{1, 2}, []WorkloadEpoch{})                    // bob healthy on r1 and r2 only
			if effs := h.tick(d); len(effs) > 0 {
				t.Fatalf("Tick(%v) = %v, want no takeover", d, render(effs))
			}
		}
	})
	t.Run("config rejects takeover_after within the holder's self-fencing time", func(t *testing.T) {
		c := testConfig()
		c.TakeoverAfter = c.SelfFencingTime() + c.RelayDelay
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "takeover_after") {
			t.Fatalf("Validate() = %v, want takeover_after error", err)
		}
	})
}

func TestRule8_ConcurrentClaimersNeverBothStart(t *testing.T) {
	// bob and carol both got to the claim step for epoch 2 (say, bob by
	// revocation and carol by takeover). Relays are modelled as one claim
	// board; each reader sees every claim published before its read.
	bob := newHarness(t, "bob", nil)
	carol := newHarness(t, "carol", nil)
	spec := warmSpec("w1", "alice", "bob", "carol")
	bob.track(0, spec)
	carol.track(0, spec)
	bob.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(100 * s)})
	carol.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("carol"), QuorumAt: at(100 * s)}) // conflicting successor (e.g. a lying primary)
	board := map[string]bool{"bob": true, "carol": true}                                                                                             // both active
	bob.m.ClaimPublished(at(101*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3})
	carol.m.ClaimPublished(at(101*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3})
	read := func(h *harness, self, other string, d time.Duration) []Effect {
		var effs []Effect
		comp := 0
		if board[other] {
			comp = 1
			effs = append(effs, h.m.ObserveClaim(at(d), PromotionClaim{Workload: "w1", Claimer: key(other), Epoch: 2, Active: true})...)
		}
		effs = append(effs, h.m.ClaimsRead(at(d), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3, Competing: comp})...)
		if hasEffect[WithdrawClaim](effs) {
			board[self] = false
		}
		return effs
	}
	e1 := read(bob, "bob", "carol", 111*s)
	e2 := read(carol, "carol", "bob", 112*s)
	if hasEffect[StartWorkload](e1) && hasEffect[StartWorkload](e2) {
		t.Fatalf("both started: bob %v, carol %v", render(e1), render(e2))
	}
	// bob withdrew (carol's claim was on the board), carol read after bob's
	// withdrawal and won.
	bob.wantEffects("bob read", e1, "withdraw w1 epoch=2")
	carol.wantEffects("carol read", e2, "entered w1 promoting -> provisioning epoch=2", "start w1 epoch=2", "announce w1 epoch=2")
	// carol's heartbeat listing epoch 2 stops bob's retries.
	effs := bob.hb(130*s, "carol", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
	bob.wantEffects("bob sees carol hold epoch 2", effs, "entered w1 promoting -> standby epoch=2")
}

func TestRule8_CompetingClaimRetriesAfterRankedBackoff(t *testing.T) {
	h := newHarness(t, "carol", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	h.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("carol"), QuorumAt: at(100 * s)})
	h.m.ObserveClaim(at(100*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
	h.m.ClaimPublished(at(101*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 2})
	effs := h.m.ClaimsRead(at(111*s), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3})
	h.wantEffects("ClaimsRead(rival seen live)", effs, "withdraw w1 epoch=2")
	cfg := h.m.Config()
	retry := 111*s + cfg.ClaimBackoff(1, 1) // carol is rank 1
	h.wantEffects("Tick(before retry)", h.tick(retry-1))
	// bob withdrew meanwhile: carol retries and wins.
	h.m.ObserveClaim(at(retry-1), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: false})
	h.wantEffects("Tick(retry)", h.tick(retry), "claim w1 epoch=2")
	effs = claimStep(h, retry+s, 2)
	h.wantEffects("claim step", effs, "read-claims w1 epoch=2 at=+2m52s", "entered w1 promoting -> provisioning epoch=2", "start w1 epoch=2", "announce w1 epoch=2")
}

// TestRule8_CompetingCountAloneWithdraws: a claim read that counted one
// competing claim withdraws even when the rival's claim never reached the
// machine as an input (the read found it; the live subscription did not
// deliver it): the count alone decides.
func TestRule8_CompetingCountAloneWithdraws(t *testing.T) {
	for _, competing := range []int{1, 2} {
		h := newHarness(t, "carol", nil)
		h.track(0, warmSpec("w1", "alice", "bob", "carol"))
		h.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("carol"), QuorumAt: at(100 * s)})
		h.m.ClaimPublished(at(101*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3})
		effs := h.m.ClaimsRead(at(111*s), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3, Competing: competing})
		h.wantEffects(fmt.Sprintf("ClaimsRead(competing=%d, no rival observed)", competing), effs, "withdraw w1 epoch=2")
	}
}

func TestRule9_HigherEpochFences(t *testing.T) {
	t.Run("claim of a higher epoch", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		effs := h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
		h.wantEffects("ObserveClaim", effs, "entered w1 live -> fenced epoch=1", `stop w1 epoch=1 reason="epoch 2 claimed by bob"`)
		if got := h.m.Held(nil); len(got) != 0 {
			t.Fatalf("Held() = %v, want none", got)
		}
	})
	t.Run("heartbeat listing a higher epoch", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		effs := h.hb(301*s, "bob", []int{2}, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		h.wantEffects("ObserveHeartbeat", effs, "entered w1 live -> fenced epoch=1", `stop w1 epoch=1 reason="epoch 2 held by bob"`,
			"entered w1 fenced -> standby epoch=2")
	})
	t.Run("withdrawn or equal-epoch claims do not fence", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		h.wantEffects("withdrawn", h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2}))
		h.wantEffects("equal", h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 1, Active: true}))
		h.wantState("w1", StateLive)
		if got := h.m.Held(nil); len(got) != 1 || got[0] != (WorkloadEpoch{ID: "w1", Epoch: 1}) {
			t.Fatalf("Held() = %v, want [{w1 1}]", got)
		}
	})
}

func restoreJSON(t *testing.T, h *harness, d time.Duration) []Effect {
	t.Helper()
	m, effs, err := Restore(at(d), h.m.Config(), roundTrip(t, h.m.Snapshot()))
	if err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	h.m = m
	return effs
}

func TestRule10_RestoredLiveWaitsForRelaySync(t *testing.T) {
	t.Run("resumes after M relays synced", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		effs := restoreJSON(t, h, 400*s)
		h.wantEffects("Restore", effs, "entered w1 live -> syncing epoch=1")
		if got := h.m.Held(nil); len(got) != 1 {
			t.Fatalf("Held() = %v, want w1 still listed while syncing", got)
		}
		h.wantEffects("RelaySynced(r1)", h.m.RelaySynced(at(401*s), "wss://r1.test"))
		h.wantEffects("RelaySynced(r1 again)", h.m.RelaySynced(at(401*s), "wss://r1.test"))
		h.wantEffects("RelaySynced(r3)", h.m.RelaySynced(at(402*s), "wss://r3.test"),
			"entered w1 syncing -> live epoch=1", "start w1 epoch=1")
	})
	t.Run("higher epoch found while syncing fences", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		restoreJSON(t, h, 2000*s)
		effs := h.m.ObserveClaim(at(2001*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
		h.wantEffects("ObserveClaim", effs, "entered w1 syncing -> fenced epoch=1", `stop w1 epoch=1 reason="epoch 2 claimed by bob"`)
		h.m.RelaySynced(at(2002*s), "wss://r1.test")
		h.wantEffects("RelaySynced", h.m.RelaySynced(at(2002*s), "wss://r2.test"))
	})
	t.Run("no sync within provision_timeout evicts a warm-standby workload", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
		restoreJSON(t, h, 310*s)
		cfg := h.m.Config()
		h.beat("alice", 320*s, 310*s+cfg.ProvisionTimeout-s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		h.wantState("w1", StateSyncing)
		effs := h.tick(310*s + cfg.ProvisionTimeout)
		if h.state("w1") != StateEvicted || hasEffect[Failed](effs) || !hasEffect[PublishRevocation](effs) {
			t.Fatalf("Tick(sync timeout) = %v, want evicted and handed to bob", render(effs))
		}
	})
	t.Run("no sync within provision_timeout fails", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice"), 300*s, nil)
		restoreJSON(t, h, 310*s)
		cfg := h.m.Config()
		h.beat("alice", 320*s, 310*s+cfg.ProvisionTimeout-s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		h.wantState("w1", StateSyncing)
		effs := h.tick(310*s + cfg.ProvisionTimeout)
		if h.state("w1") != StateFailed || !hasEffect[Failed](effs) {
			t.Fatalf("Tick(sync timeout) = %v, want failed", render(effs))
		}
	})
}

func TestRule11_ProvisionTimeout(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice"))
	h.hb(10*s, "alice", []int{1}, []WorkloadEpoch{}) // one relay is not quorum
	cfg := h.m.Config()
	h.wantEffects("Tick(before timeout)", h.tick(cfg.ProvisionTimeout-1))
	h.wantEffects("Tick(timeout)", h.tick(cfg.ProvisionTimeout),
		"entered w1 provisioning -> failed epoch=1",
		`stop w1 epoch=1 reason="provision timeout: no relay quorum within 5m0s"`,
		`failed w1 epoch=1 reason="provision timeout: no relay quorum within 5m0s"`)
}

// TestRule11_ProvisionTimeoutEvictsWhatQuorumLossWould: a workload that
// quorum loss evicts (warm-standby, or evict_without_standby) and that
// reaches no relay quorum within ProvisionTimeout is evicted (stopped,
// handed to its standby), not failed for good, as a Live one that loses
// quorum would be: a relay outage just after a claim is not forever.
// Nobody claims it: alice takes it back by the retake rule.
func TestRule11_ProvisionTimeoutEvictsWhatQuorumLossWould(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.hb(10*s, "alice", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 1}}) // one relay is not quorum
	cfg := h.m.Config()
	h.wantEffects("Tick(before timeout)", h.tick(cfg.ProvisionTimeout-1))
	effs := h.tick(cfg.ProvisionTimeout)
	if hasEffect[Failed](effs) || h.state("w1") != StateEvicted || !hasEffect[StopWorkload](effs) {
		t.Fatalf("Tick(provision timeout) = %v, want evicted (not failed) and stopped", render(effs))
	}
	revoked := false
	for _, e := range effs {
		if r, ok := e.(PublishRevocation); ok {
			revoked = r.Successor == key("bob") && r.Reason == "provision timeout: no relay quorum within 5m0s"
		}
	}
	if !revoked {
		t.Fatalf("Tick(provision timeout) = %v, want a revocation naming bob, saying why", render(effs))
	}
	h.aliceRetakes(cfg.ProvisionTimeout, "after its provision timeout")

	// Without a standby, with evict_without_standby: evicted and stopped,
	// nobody to hand it to.
	h = newHarness(t, "alice", func(c *Config) { c.EvictWithoutStandby = true })
	h.track(0, warmSpec("w1", "alice"))
	effs = h.tick(cfg.ProvisionTimeout)
	if hasEffect[Failed](effs) || hasEffect[PublishRevocation](effs) || !hasEffect[StopWorkload](effs) || h.state("w1") != StateEvicted {
		t.Fatalf("Tick(provision timeout, evict_without_standby) = %v, want evicted and stopped", render(effs))
	}
}

func TestRule11_RespawnDuringProvisioningStaysBounded(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice"))
	h.m.ProcessExited(at(10*s), ProcessExit{Workload: "w1", Epoch: 1})
	h.wantEffects("Tick(respawn due)", h.tick(15*s), "respawn w1 epoch=1 attempt=1 at=+15s")
	h.wantEffects("RespawnDone(ok)", h.m.RespawnDone(at(15*s), RespawnResult{Workload: "w1", Attempt: 1, OK: true}),
		"entered w1 respawning -> provisioning epoch=1")
	cfg := h.m.Config()
	effs := h.tick(15*s + cfg.ProvisionTimeout)
	if h.state("w1") != StateFailed || !hasEffect[Failed](effs) {
		t.Fatalf("Tick(provision timeout after respawn) = %v, want failed", render(effs))
	}
}
