package lease

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// revokeAt is alice's revocation of w1 at epoch 1 naming bob, made while
// alice last had quorum at q.
func revokeAt(q time.Duration) Revocation {
	return Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), CreatedAt: at(q), QuorumAt: at(q)}
}

// TestRevocationDeadline: a revocation starts the claim step only before
// any takeover of the revoking holder could have begun (its last quorum
// plus TakeoverAfter, less MaxSkew and the drift of two
// clocks), and the claim step it started must read the relays before then;
// otherwise the standby falls back on the takeover rule. A revocation heard
// late (a successor cut off or rebooted while another standby took over,
// and a relay that lost the new holder's claim) would otherwise start a
// second copy at the same epoch (props' TestLateRevocationBesideLiveHolder).
func TestRevocationDeadline(t *testing.T) {
	cfg := testConfig()
	drift := cfg.TakeoverAfter * 2 * MaxDriftPPM / 1_000_000
	slack := cfg.TakeoverAfter - cfg.MaxSkew - drift
	const q = 100 * time.Second
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	if got, want := h.m.RevocationDeadline(revokeAt(q)), at(q+slack); !got.Equal(want) {
		t.Fatalf("RevocationDeadline(quorum at +%v) = %v, want %v", q, humanise(got.Format(time.RFC3339Nano)), humanise(want.Format(time.RFC3339Nano)))
	}
	if got := h.m.RevocationDeadline(Revocation{Workload: "w1"}); !got.IsZero() {
		t.Fatalf("RevocationDeadline(quorum unknown) = %v, want zero", got)
	}

	t.Run("heard before the deadline", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.wantEffects("ObserveRevocation", h.m.ObserveRevocation(at(q+slack-s), revokeAt(q)),
			"entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")
	})
	t.Run("heard at the deadline", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.wantEffects("ObserveRevocation", h.m.ObserveRevocation(at(q+slack), revokeAt(q)))
		h.wantState("w1", StateStandby)
		if w, _ := h.m.Workload("w1"); !w.Revoked {
			t.Fatalf("Workload(w1).Revoked = false after the holder's late revocation, want true")
		}
	})
	t.Run("holder's last quorum unknown", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		r := revokeAt(q)
		r.QuorumAt = time.Time{}
		h.wantEffects("ObserveRevocation", h.m.ObserveRevocation(at(q+s), r))
		h.wantState("w1", StateStandby)
	})
	t.Run("read reported after the deadline", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		pub := q + slack - 20*s
		h.m.ObserveRevocation(at(pub), revokeAt(q))
		h.wantEffects("ClaimPublished", h.m.ClaimPublished(at(pub+s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 2}),
			"read-claims w1 epoch=2 at="+humanise(at(pub+s+cfg.RelayDelay).Format(time.RFC3339Nano)))
		// The read answered no competing claim, but too late to trust it.
		h.wantEffects("ClaimsRead(late)", h.m.ClaimsRead(at(q+slack), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3}),
			"withdraw w1 epoch=2", "entered w1 promoting -> standby epoch=1")
	})
	t.Run("backoff ends after the deadline", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		pub := q + slack - 20*s
		h.m.ObserveRevocation(at(pub), revokeAt(q))
		h.wantEffects("ClaimPublished(too few)", h.m.ClaimPublished(at(pub+s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 1}),
			"withdraw w1 epoch=2")
		h.wantEffects("Tick(deadline)", h.tick(q+slack), "entered w1 promoting -> standby epoch=1")
	})
	t.Run("the deadline survives a restart", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		pub := q + slack - 20*s
		h.m.ObserveRevocation(at(pub), revokeAt(q))
		h.m.ClaimPublished(at(pub+s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 2})
		b, err := json.Marshal(h.m.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		var snap Snapshot
		if err := json.Unmarshal(b, &snap); err != nil {
			t.Fatal(err)
		}
		m, _, err := Restore(at(q+slack+time.Hour), cfg, snap)
		if err != nil {
			t.Fatalf("Restore() = %v", err)
		}
		h.m = m
		h.wantEffects("Outstanding", h.m.Outstanding(), "read-claims w1 epoch=2 at="+humanise(at(pub+s+cfg.RelayDelay).Format(time.RFC3339Nano)))
		h.wantEffects("ClaimsRead(after restart)", h.m.ClaimsRead(at(q+slack+time.Hour), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3}),
			"withdraw w1 epoch=2", "entered w1 promoting -> standby epoch=1")
	})
	t.Run("the takeover rule decides after it", func(t *testing.T) {
		// A successor that heard the revocation too late still takes over,
		// by silence, once the takeover rule allows it.
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		for d := time.Duration(0); d <= q; d += 30 * s {
			h.hb(d, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
			h.hb(d, "bob", all3, []WorkloadEpoch{})
		}
		h.m.ObserveRevocation(at(q+slack+s), revokeAt(q))
		var took time.Duration
		for d := q + 30*s; d <= q+cfg.TakeoverAfter+2*time.Minute && took == 0; d += 30 * s {
			h.hb(d, "bob", all3, []WorkloadEpoch{})
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				took = d
			}
		}
		if took < q+cfg.TakeoverAfter {
			t.Fatalf("takeover claim at +%v, want none before +%v (takeover_after after alice's last heartbeat)", took, q+cfg.TakeoverAfter)
		}
		if w, _ := h.m.Workload("w1"); w.Trigger != TriggerTakeover {
			t.Fatalf("claim step trigger = %q, want %q", w.Trigger, TriggerTakeover)
		}
	})
	t.Run("a clock outside the bound claims nothing by revocation", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.m.SetClockSuspect(at(q), true, "skewed")
		h.wantEffects("ObserveRevocation", h.m.ObserveRevocation(at(q+s), revokeAt(q)))
	})
}

// TestRevocationCarriesTheHoldersLastQuorum: the holder's revocation says
// when its own heartbeats listing the workload last came back from M
// relays, the bound its successor's deadline rests on; zero when that
// never happened at the epoch revoked.
func TestRevocationCarriesTheHoldersLastQuorum(t *testing.T) {
	cfg := testConfig()
	quorumAtOf := func(effs []Effect) (time.Time, bool) {
		for _, e := range effs {
			if r, ok := e.(PublishRevocation); ok {
				return r.QuorumAt, true
			}
		}
		return time.Time{}, false
	}
	t.Run("last quorum while holding", func(t *testing.T) {
		h := newHarness(t, "alice", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.beat("alice", 0, 300*s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		if got := h.m.QuorumAt("w1"); !got.Equal(at(300 * s)) {
			t.Fatalf("QuorumAt(w1) while holding = %v, want +5m0s (what its revocation would carry)", got)
		}
		if got := h.m.QuorumAt("unknown"); !got.IsZero() {
			t.Fatalf("QuorumAt(unknown) = %v, want zero", got)
		}
		// Only relay 1 still carries alice's beats: quorum (M=2) was last
		// had with the beat at 300 s.
		var got time.Time
		found := false
		for d := 360 * s; d <= 300*s+cfg.Stale+cfg.T1+cfg.T2+time.Minute && !found; d += 60 * s {
			h.hb(d, "alice", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
			got, found = quorumAtOf(h.tick(d))
		}
		if !found || !got.Equal(at(300*s)) {
			t.Fatalf("revocation QuorumAt = %v (found %v), want +5m0s", humanise(got.Format(time.RFC3339Nano)), found)
		}
	})
	t.Run("never had quorum at the epoch", func(t *testing.T) {
		h := newHarness(t, "alice", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		var got time.Time
		found := false
		for d := 60 * s; d <= cfg.ProvisionTimeout+time.Minute && !found; d += 60 * s {
			h.hb(d, "alice", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
			if q := h.m.QuorumAt("w1"); !q.IsZero() {
				t.Fatalf("QuorumAt(w1) at %v = %v with beats on one relay, want zero", d, q)
			}
			got, found = quorumAtOf(h.tick(d))
		}
		if !found || !got.IsZero() {
			t.Fatalf("revocation QuorumAt = %v (found %v), want zero", got, found)
		}
	})
	t.Run("a standby holds nothing to revoke", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.beat("alice", 0, 120*s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		h.beat("bob", 0, 120*s, 60*s, nil)
		if got := h.m.QuorumAt("w1"); !got.IsZero() {
			t.Fatalf("standby's QuorumAt(w1) = %v, want zero", got)
		}
	})
}

// TestSameEpochHoldersResolve: two holders of one epoch (possible only when
// relays lost a claim the claim step needed) resolve as soon as they hear
// each other: the one the lease ranks lower fences itself, the other keeps
// running, whichever hears first.
func TestSameEpochHoldersResolve(t *testing.T) {
	// bob and carol both won epoch 2 of alice's workload.
	holding := func(t *testing.T, self string) *harness {
		h := newHarness(t, self, nil)
		h.track(0, warmSpec("w1", "alice", "bob", "carol"))
		r := Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key(self), QuorumAt: at(10 * s)}
		h.m.ObserveRevocation(at(10*s), r)
		if got := render(claimStep(h, 11*s, 2)); got != "read-claims w1 epoch=2 at=+21s\nentered w1 promoting -> provisioning epoch=2\nstart w1 epoch=2\nannounce w1 epoch=2" {
			t.Fatalf("claim step of %s = %s", self, got)
		}
		h.beat(self, 30*s, 90*s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		h.wantState("w1", StateLive)
		return h
	}
	t.Run("the lower rank fences", func(t *testing.T) {
		h := holding(t, "carol")
		h.wantEffects("heartbeat of bob at epoch 2", h.hb(100*s, "bob", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 2}}),
			"entered w1 live -> fenced epoch=2",
			`stop w1 epoch=2 reason="epoch 2 also held by bob, which the lease ranks first"`,
			"entered w1 fenced -> standby epoch=2")
	})
	t.Run("the higher rank keeps running", func(t *testing.T) {
		h := holding(t, "bob")
		h.wantEffects("heartbeat of carol at epoch 2", h.hb(100*s, "carol", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}}))
		h.wantEffects("Tick", h.tick(100*s))
		h.wantState("w1", StateLive)
		if got := h.m.Held(nil); len(got) != 1 || got[0] != (WorkloadEpoch{ID: "w1", Epoch: 2}) {
			t.Fatalf("Held() = %v, want [{w1 2}]", got)
		}
	})
	t.Run("the primary outranks every standby", func(t *testing.T) {
		h := holding(t, "bob")
		h.wantEffects("heartbeat of alice at epoch 2", h.hb(100*s, "alice", []int{2}, []WorkloadEpoch{{ID: "w1", Epoch: 2}}),
			"entered w1 live -> fenced epoch=2",
			`stop w1 epoch=2 reason="epoch 2 also held by alice, which the lease ranks first"`,
			"entered w1 fenced -> standby epoch=2")
	})
}

// TestPaygressRevocationDeadline: a Paygress holder's revocation carries no
// quorum_at, but every heartbeat of such a holder (it lists no workloads)
// claims everything it holds, so the newest one this standby got from M
// relays bounds a takeover instead.
func TestPaygressRevocationDeadline(t *testing.T) {
	cfg := testConfig()
	drift := cfg.TakeoverAfter * 2 * MaxDriftPPM / 1_000_000
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.hb(90*s, "alice", []int{1, 2}, nil)
	h.hb(100*s, "alice", []int{1}, nil) // on one relay only: not yet M
	r := Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), CreatedAt: at(100 * s)}
	if got, want := h.m.RevocationDeadline(r), at(90*s+cfg.TakeoverAfter-cfg.MaxSkew-drift); !got.Equal(want) {
		t.Fatalf("RevocationDeadline(paygress) = %v, want %v", humanise(got.Format(time.RFC3339Nano)), humanise(want.Format(time.RFC3339Nano)))
	}
	h.wantEffects("ObserveRevocation(paygress)", h.m.ObserveRevocation(at(101*s), r),
		"entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")

	// A holder that lists its workloads gets no such bound from its
	// heartbeats: after its revocation they no longer list the workload.
	h = newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.hb(90*s, "alice", all3, []WorkloadEpoch{})
	if got := h.m.RevocationDeadline(r); !got.IsZero() {
		t.Fatalf("RevocationDeadline(listing holder, no quorum_at) = %v, want zero", got)
	}
}

// TestFormerPrimaryRejoinsAsStandby: after a failover the lease keeps a
// standby. The new holder's standbys are the lease's other standbys, then
// the former primary; the former primary, fenced by the higher epoch,
// rejoins as the new holder's standby as soon as it hears its heartbeats,
// and the new holder's revocation may name it and hand the workload back.
func TestFormerPrimaryRejoinsAsStandby(t *testing.T) {
	cfg := testConfig()
	// bob took over alice's epoch 1 and holds epoch 2.
	bob := newHarness(t, "bob", nil)
	bob.track(0, warmSpec("w1", "alice", "bob"))
	bob.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
	claimStep(bob, 11*s, 2)
	if w, _ := bob.m.Workload("w1"); !slices.Equal(StandbysOf(w), []string{key("alice")}) {
		t.Fatalf("StandbysOf(w1 held by bob) = %v, want [alice]", StandbysOf(w))
	}
	// alice, healthy, hears bob hold epoch 2: fenced, then bob's standby.
	alice := liveAlice(t, warmSpec("w1", "alice", "bob"), 60*s, nil)
	alice.wantEffects("heartbeat of bob at epoch 2", alice.hb(70*s, "bob", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}}),
		"entered w1 live -> fenced epoch=1", `stop w1 epoch=1 reason="epoch 2 held by bob"`, "entered w1 fenced -> standby epoch=2")
	// bob loses quorum while alice is alive: its revocation names her.
	var rev PublishRevocation
	for d := 20 * s; d <= 20*s+cfg.Stale+cfg.T1+cfg.T2+time.Minute; d += 10 * s {
		if d <= 60*s {
			bob.hb(d, "bob", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		}
		bob.hb(d, "alice", all3, []WorkloadEpoch{})
		for _, e := range bob.tick(d) {
			if r, ok := e.(PublishRevocation); ok {
				rev = r
			}
		}
	}
	if rev.Successor != key("alice") || !slices.Equal(rev.Standbys, []string{key("alice")}) {
		t.Fatalf("bob's revocation names successor %s, standbys %v; want alice", keyName(rev.Successor), rev.Standbys)
	}
	r := Revocation{Workload: "w1", Signer: key("bob"), Epoch: 2, Successor: key("alice"), CreatedAt: at(400 * s), QuorumAt: rev.QuorumAt}
	alice.wantEffects("alice hears bob's revocation", alice.m.ObserveRevocation(at(400*s), r),
		"entered w1 standby -> promoting epoch=2", "claim w1 epoch=3")
}

// TestStandbyAlive: a holder sees a standby alive while one of the
// members standing by for it sent a counting heartbeat within Stale, the
// former primary included once another provider holds; Successor names
// the first of them, and the first ranked standby while it hears none (a
// holder resuming from a long stall heard nobody: naming nobody left the
// workload down until it retook it).
func TestStandbyAlive(t *testing.T) {
	h := liveAlice(t, warmSpec("w1", "alice", "bob", "carol"), 100*s, nil)
	if h.m.StandbyAlive("w1") || h.m.Successor("w1") != key("bob") {
		t.Fatalf("no standby heard: StandbyAlive = %v, Successor = %q, want false, bob (first ranked)", h.m.StandbyAlive("w1"), h.m.Successor("w1"))
	}
	h.hb(101*s, "carol", []int{1}, []WorkloadEpoch{})
	h.tick(102 * s)
	if !h.m.StandbyAlive("w1") || h.m.Successor("w1") != key("carol") {
		t.Fatalf("carol heard: StandbyAlive = %v, Successor = %q, want true, carol", h.m.StandbyAlive("w1"), h.m.Successor("w1"))
	}
	h.hb(102*s, "bob", []int{2}, []WorkloadEpoch{})
	h.tick(103 * s)
	if got := h.m.Successor("w1"); got != key("bob") {
		t.Fatalf("bob and carol heard: Successor = %q, want bob (the first standby)", got)
	}
	h.hb(100*s+h.m.Config().Stale, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}}) // alice keeps quorum
	h.tick(102*s + h.m.Config().Stale)
	if h.m.StandbyAlive("w1") {
		t.Fatalf("Stale after the standbys' last heartbeats: StandbyAlive = true, want false")
	}
	if h.m.StandbyAlive("nope") || h.m.Successor("nope") != "" {
		t.Fatalf("untracked: StandbyAlive = %v, Successor = %q, want false, none", h.m.StandbyAlive("nope"), h.m.Successor("nope"))
	}
	solo := liveAlice(t, warmSpec("w1", "alice"), 100*s, nil)
	if solo.m.StandbyAlive("w1") || solo.m.Successor("w1") != "" {
		t.Fatalf("a lease with no standby: StandbyAlive = %v, Successor = %q, want false, none", solo.m.StandbyAlive("w1"), solo.m.Successor("w1"))
	}
}
