package lease

import (
	"testing"
	"time"
)

// TestSilenceCountsOnlyTheProviderHeardHolding is the fixed schedule behind
// props' TestProcessExits seed 9280212158. dave, a standby, sees
// bob's claim for epoch 2 and never its withdrawal (a partition and a relay
// that lost its storage hid it), so after the settle time dave follows bob
// as the holder of epoch 2. carol is the one who won epoch 2: her heartbeats
// list w1 at epoch 2 on every relay dave reads. Before the fix dave ignored
// them (they came from a provider other than the one it followed, at the
// epoch it already knew) and counted bob's "silence" from the adoption, so
// it took over while carol was still Live: two writers. A standby must
// count silence only of the provider actually heard holding the epoch.
func TestSilenceCountsOnlyTheProviderHeardHolding(t *testing.T) {
	h := newHarness(t, "dave", nil)
	cfg := h.m.Config()
	h.track(0, warmSpec("w1", "alice", "bob", "carol", "dave"))
	h.m.ObserveClaim(at(100*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
	carolFrom, carolUntil := 400*s, 900*s
	var took time.Duration
	for d := time.Duration(0); d <= 3*3600*s && took == 0; d += s {
		if d%(60*s) == 0 {
			h.hb(d, "dave", all3, []WorkloadEpoch{}) // dave stays healthy on every relay
		}
		if d%(60*s) == 0 && d >= carolFrom && d <= carolUntil {
			h.hb(d, "carol", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		}
		if effs := h.tick(d); hasEffect[PublishClaim](effs) {
			took = d
		}
	}
	ws, _ := h.m.Workload("w1")
	if ws.Holder != key("carol") || ws.Epoch != 2 {
		t.Errorf("Workload(w1) holder, epoch = %v, %d, want carol, 2 (the provider heard holding epoch 2)", keyName(ws.Holder), ws.Epoch)
	}
	// dave is rank 1 among the standbys other than carol (bob, dave).
	earliest := carolUntil + cfg.TakeoverAfter + cfg.ClaimRetryBase
	if took < earliest {
		t.Fatalf("takeover at %v, want no earlier than %v (carol's last heartbeat + takeover_after + rank stagger)", took, earliest)
	}
}

// TestHeardHolderAbortsATakeoverClaim: a standby in the claim step by
// takeover that hears another provider list the workload at the epoch it
// follows withdraws its claim and follows that provider.
func TestHeardHolderAbortsATakeoverClaim(t *testing.T) {
	h := newHarness(t, "dave", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol", "dave"))
	h.m.ObserveClaim(at(100*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
	var took time.Duration
	for d := time.Duration(0); d <= 3*3600*s && took == 0; d += s {
		if d%(60*s) == 0 {
			h.hb(d, "dave", all3, []WorkloadEpoch{})
		}
		if effs := h.tick(d); hasEffect[PublishClaim](effs) {
			took = d
		}
	}
	if took == 0 {
		t.Fatalf("no takeover of bob's silent epoch 2 within 3 h")
	}
	h.wantState("w1", StatePromoting)
	effs := h.hb(took+2*s, "carol", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
	h.wantEffects("ObserveHeartbeat(carol lists w1@2)", effs, "withdraw w1 epoch=3", "entered w1 promoting -> standby epoch=2")
	if ws, _ := h.m.Workload("w1"); ws.Holder != key("carol") {
		t.Fatalf("Workload(w1).Holder = %v, want carol", keyName(ws.Holder))
	}
}

// TestRevocationFromAnEarlierGrantIsIgnored: revocations are addressable
// and stay on relays; after the operator released and granted the workload
// again (epochs start again at 1), an hour-old revocation of epoch 1 by the
// same primary must not send a standby into the claim step while the
// primary runs the new grant.
func TestRevocationFromAnEarlierGrantIsIgnored(t *testing.T) {
	h := newHarness(t, "bob", nil)
	spec := warmSpec("w1", "alice", "bob")
	spec.CreatedAt = at(3600 * s) // the re-grant
	h.track(3600*s, spec)
	old := Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), CreatedAt: at(10 * s), QuorumAt: at(10 * s)}
	h.wantEffects("ObserveRevocation(earlier grant)", h.m.ObserveRevocation(at(3601*s), old))
	h.wantState("w1", StateStandby)
	fresh := old
	fresh.CreatedAt, fresh.QuorumAt = at(3700*s), at(3700*s)
	effs := h.m.ObserveRevocation(at(3701*s), fresh)
	h.wantEffects("ObserveRevocation(current grant)", effs, "entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")
}

// TestOlderClaimVersionIsIgnored: a claim and the withdrawn marker that
// replaced it may arrive out of order (a reordering link; a relay that
// missed the withdrawal and serves the older claim in a later claim read).
// The older version must not bring the rival back: a rival that stays
// "active" is adopted as holder after the settle time (the ghost of issue
// 17), and a holder would fence on it.
func TestOlderClaimVersionIsIgnored(t *testing.T) {
	h := newHarness(t, "dave", nil)
	cfg := h.m.Config()
	h.track(0, warmSpec("w1", "alice", "bob", "carol", "dave"))
	claim := PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true, CreatedAt: at(100 * s)}
	withdrawn := claim
	withdrawn.Active, withdrawn.CreatedAt = false, at(105*s)
	h.m.ObserveClaim(at(106*s), withdrawn)
	h.m.ObserveClaim(at(107*s), claim) // the older version, late
	if ws, _ := h.m.Workload("w1"); len(ws.Rivals) != 0 {
		t.Fatalf("Workload(w1).Rivals = %+v after a late older claim, want none", ws.Rivals)
	}
	h.tick(107*s + 2*cfg.ClaimTimeout + cfg.RelayDelay + s)
	if ws, _ := h.m.Workload("w1"); ws.Holder != key("alice") || ws.Epoch != 1 {
		t.Fatalf("Workload(w1) holder, epoch = %v, %d, want alice, 1 (no ghost adopted)", keyName(ws.Holder), ws.Epoch)
	}
	// A newer claim from bob counts again.
	again := claim
	again.CreatedAt = at(200 * s)
	h.m.ObserveClaim(at(201*s), again)
	if ws, _ := h.m.Workload("w1"); len(ws.Rivals) != 1 {
		t.Fatalf("Workload(w1).Rivals = %+v after a newer claim, want bob's", ws.Rivals)
	}
}

// TestAfterHeld: once held steps persist, outbox effects go out in order, a
// held start runs only if the machine still holds the workload running (a
// later stop supersedes it), and held claim-step requests come back from
// Outstanding.
func TestAfterHeld(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("run", "bob", "alice"))
	h.track(0, warmSpec("gone", "bob", "alice"))
	h.track(0, warmSpec("claim", "alice", "bob"))
	h.m.ObserveRevocation(at(10*s), Revocation{Workload: "claim", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
	h.m.ObserveClaim(at(11*s), PromotionClaim{Workload: "gone", Claimer: key("alice"), Epoch: 2, Active: true}) // fences "gone"
	held := []Effect{
		StartWorkload{ID: "run", Epoch: 1},
		StartWorkload{ID: "gone", Epoch: 1},
		PublishRevocation{ID: "gone", Epoch: 1, Reason: "r"},
		StopWorkload{ID: "gone", Epoch: 1},
		PublishClaim{ID: "claim", Epoch: 2},
		WithdrawClaim{ID: "claim", Epoch: 2},
	}
	h.wantEffects("AfterHeld", h.m.AfterHeld(held),
		`revoke gone epoch=1 successor= standbys=[] quorum_at=- reason="r"`,
		"withdraw claim epoch=2",
		"start run epoch=1",
		"claim claim epoch=2")
}
