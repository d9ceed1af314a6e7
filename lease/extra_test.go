package lease

import (
	"testing"
	"time"
)

func TestClaimStepTimeoutsAndAdoption(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	cfg := h.m.Config()
	h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
	h.wantEffects("Outstanding(publishing)", h.m.Outstanding(), "claim w1 epoch=2")
	// no ClaimPublished ever arrives: withdraw after ClaimTimeout.
	h.wantEffects("Tick(before claim timeout)", h.tick(10*s+cfg.ClaimTimeout-1))
	h.wantEffects("Tick(claim timeout)", h.tick(10*s+cfg.ClaimTimeout), "withdraw w1 epoch=2")
	h.wantEffects("Outstanding(backoff)", h.m.Outstanding())
	// carol's claim for epoch 2 stands, never withdrawn: after the settle
	// time bob follows carol as the holder at epoch 2.
	h.m.ObserveClaim(at(41*s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: 2, Active: true})
	retry := 10*s + cfg.ClaimTimeout + cfg.ClaimBackoff(1, 0)
	h.wantEffects("Tick(retry)", h.tick(retry), "claim w1 epoch=2")
	h.m.ClaimPublished(at(retry), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3})
	h.wantEffects("ClaimsRead(carol active)", h.m.ClaimsRead(at(retry+cfg.RelayDelay), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3}), "withdraw w1 epoch=2")
	settled := 41*s + 2*cfg.ClaimTimeout + cfg.RelayDelay
	var effs []Effect
	for d := retry + cfg.RelayDelay; d <= settled+cfg.ClaimRetryMax; d += s {
		effs = append(effs, h.tick(d)...)
		if h.state("w1") == StateStandby {
			break
		}
	}
	h.wantState("w1", StateStandby)
	if ws, _ := h.m.Workload("w1"); ws.Holder != key("carol") || ws.Epoch != 2 {
		t.Fatalf("Workload(w1) holder, epoch = %v, %d, want carol, 2", keyName(ws.Holder), ws.Epoch)
	}
}

func TestExpiryWithdrawsAndRemove(t *testing.T) {
	h := newHarness(t, "bob", nil)
	spec := warmSpec("w1", "alice", "bob")
	spec.ExpiresAt = at(time.Hour)
	h.track(0, spec)
	h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
	h.wantEffects("Tick(expiry)", h.tick(time.Hour), "entered w1 promoting -> expired epoch=1", "withdraw w1 epoch=2")
	h.wantEffects("Tick(after expiry)", h.tick(2*time.Hour))
	if !h.m.Remove("w1") || h.m.Remove("w1") || h.m.Len() != 0 {
		t.Fatalf("Remove(w1) twice: want true then false and an empty machine")
	}
}

func TestHugeEpochsAndRivalsAreBounded(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	h.wantEffects("ObserveClaim(huge)", h.m.ObserveClaim(at(s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: MaxEpoch + 1, Active: true}))
	h.wantEffects("ObserveHeartbeat(huge)", h.hb(s, "carol", all3, []WorkloadEpoch{{ID: "w1", Epoch: ^uint64(0)}}))
	for e := uint64(2); e < 100; e++ {
		h.m.ObserveClaim(at(2*s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: e, Active: true})
	}
	if ws, _ := h.m.Workload("w1"); len(ws.Rivals) != 1 || ws.Epoch != 1 {
		t.Fatalf("Workload(w1) rivals, epoch = %v, %d, want one rival, epoch 1", ws.Rivals, ws.Epoch)
	}
}

func TestObserveSteadyStateDoesNotAllocate(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.track(0, warmSpec("w2", "bob", "alice"))
	list := []WorkloadEpoch{{ID: "w2", Epoch: 1}}
	bob, alice := key("bob"), key("alice")
	d := time.Duration(0)
	allocs := testing.AllocsPerRun(1000, func() {
		d += s
		h.m.ObserveHeartbeat(at(d), Heartbeat{Provider: bob, Relay: "wss://r2.test", CreatedAt: at(d), ReceivedAt: at(d), Listed: true, Workloads: list})
		h.m.ObserveHeartbeat(at(d), Heartbeat{Provider: alice, Relay: "wss://r1.test", CreatedAt: at(d), ReceivedAt: at(d)})
		h.m.Tick(at(d))
	})
	if allocs != 0 {
		t.Fatalf("AllocsPerRun(ObserveHeartbeat+Tick) = %v, want 0", allocs)
	}
}
