package lease

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClockSuspect: a provider whose driver finds its clock outside the
// bound evicts what it holds (other providers cannot judge its heartbeats)
// and never takes over (silence measured on a wrong clock is no evidence);
// a revocation naming it still starts the claim step.
func TestClockSuspect(t *testing.T) {
	t.Run("holder evicts its warm-standby workloads, keeps the others", func(t *testing.T) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 600*s, nil)
		h.track(600*s, warmSpec("solo", "alice"))
		h.beat("alice", 600*s, 700*s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}, {ID: "solo", Epoch: 1}})
		h.wantState("solo", StateLive)
		h.wantEffects("SetClockSuspect", h.m.SetClockSuspect(at(701*s), true, "1h0m0s ahead of the relays"))
		effs := h.tick(702 * s)
		h.wantState("w1", StateEvicted)
		h.wantState("solo", StateLive)
		got := render(effs)
		if !strings.Contains(got, `stop w1 epoch=1 reason="clock outside the bound: 1h0m0s ahead of the relays"`) ||
			!hasEffect[PublishRevocation](effs) || strings.Index(got, "stop w1") > strings.Index(got, "revoke w1") {
			t.Fatalf("Tick(clock suspect) = \n%s\nwant a stop of w1, then its revocation", got)
		}
	})
	t.Run("standby never takes over while suspect, and does once trusted again", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.hb(0, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		h.m.SetClockSuspect(at(s), true, "5m0s behind the relays")
		var took time.Duration
		for d := time.Duration(0); d <= 2*3600*s && took == 0; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if d == 3600*s {
				h.m.SetClockSuspect(at(d), false, "")
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				took = d
			}
		}
		if took < 3600*s {
			t.Fatalf("takeover at %v, want none before the clock is trusted again at 1h0m0s", took)
		}
	})
	t.Run("a takeover claim in progress is withdrawn", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.hb(0, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		var took time.Duration
		for d := time.Duration(0); d <= 3600*s && took == 0; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				took = d
			}
		}
		h.wantState("w1", StatePromoting)
		h.wantEffects("SetClockSuspect", h.m.SetClockSuspect(at(took+s), true, "skewed"),
			"withdraw w1 epoch=2", "entered w1 promoting -> standby epoch=1")
	})
	t.Run("a revocation naming us starts no claim step", func(t *testing.T) {
		// Its deadline (RevocationDeadline) compares the holder's clock
		// with ours, which is outside the bound.
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.m.SetClockSuspect(at(s), true, "skewed")
		effs := h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
		h.wantEffects("ObserveRevocation", effs)
		h.wantState("w1", StateStandby)
	})
	t.Run("the flag survives a restart", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.m.SetClockSuspect(at(s), true, "skewed")
		b, err := json.Marshal(h.m.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		var snap Snapshot
		if err := json.Unmarshal(b, &snap); err != nil {
			t.Fatal(err)
		}
		m, _, err := Restore(at(2*s), h.m.Config(), snap)
		if err != nil {
			t.Fatalf("Restore() = %v", err)
		}
		if sus, why := m.ClockSuspect(); !sus || why != "skewed" {
			t.Fatalf("ClockSuspect() after restore = %v, %q, want true, skewed", sus, why)
		}
	})
}

// TestRetakeAfterSelfFencing: a primary that evicted
// itself after losing quorum, then finds its relays again, takes the
// workload back through the claim step at epoch+1 once it has been healthy
// for TakeoverAfter with no higher epoch seen; a standby's claim meanwhile
// fences it for good instead.
func TestRetakeAfterSelfFencing(t *testing.T) {
	evicted := func(t *testing.T) (*harness, time.Duration) {
		h := liveAlice(t, warmSpec("w1", "alice", "bob"), 600*s, nil)
		var at time.Duration
		for d := 601 * s; d <= 3600*s && at == 0; d += s {
			if effs := h.tick(d); hasEffect[PublishRevocation](effs) {
				at = d
			}
		}
		h.wantState("w1", StateEvicted)
		return h, at
	}
	t.Run("no standby claimed: retake", func(t *testing.T) {
		h, ev := evicted(t)
		cfg := h.m.Config()
		back := ev + 60*s // alice's heartbeats reach the relays again
		h.reconnect(back)
		var took time.Duration
		for d := back; d <= back+2*cfg.TakeoverAfter && took == 0; d += s {
			if (d-back)%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				took = d
			}
		}
		if want := shownAt(back, back+cfg.TakeoverAfter); took != want {
			t.Fatalf("retake claim at %v, want %v (back on the relays + takeover_after)", took, want)
		}
		h.m.ClaimPublished(at(took+s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3})
		effs := h.m.ClaimsRead(at(took+s+cfg.RelayDelay), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3})
		h.wantEffects("ClaimsRead(retake)", effs, "entered w1 promoting -> provisioning epoch=2", "start w1 epoch=2", "announce w1 epoch=2")
	})
	t.Run("a standby claimed and holds: fenced, no retake", func(t *testing.T) {
		h, ev := evicted(t)
		cfg := h.m.Config()
		h.m.ObserveClaim(at(ev+20*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true, CreatedAt: at(ev + 19*s)})
		h.wantState("w1", StateFenced)
		for d := ev + 60*s; d <= ev+3*cfg.TakeoverAfter; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
				h.hb(d, "bob", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				t.Fatalf("Tick(%v) = %v, want no claim while bob holds epoch 2", d, render(effs))
			}
		}
		h.wantState("w1", StateStandby)
	})
	// props' TestLivenessAfterHeal seed 3541188137265719607: the claimer
	// failed (terminal) before its first heartbeat reached alice, so no
	// heartbeat ever ended the fence. Once the claim has settled alice
	// follows bob as a standby does, and the takeover rule, not a retake,
	// moves the workload on: epoch 3, after takeover_after of bob's
	// silence counted from then.
	t.Run("a standby claimed and was never heard: fenced, then its standby", func(t *testing.T) {
		h, ev := evicted(t)
		cfg := h.m.Config()
		claimed := ev + 20*s
		h.m.ObserveClaim(at(claimed), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true, CreatedAt: at(ev + 19*s)})
		h.wantState("w1", StateFenced)
		settled := claimed + 2*cfg.ClaimTimeout + cfg.RelayDelay
		var took time.Duration
		for d := ev + 21*s; d <= ev+4*cfg.TakeoverAfter && took == 0; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
			}
			effs := h.tick(d)
			if d == settled {
				h.wantEffects(fmt.Sprintf("Tick(%v), the claim settled", d), effs, "entered w1 fenced -> standby epoch=2")
			}
			for _, e := range effs {
				if c, ok := e.(PublishClaim); ok {
					if c.Epoch != 3 {
						t.Fatalf("Tick(%v) = %v, want a claim of epoch 3 (never a retake)", d, render(effs))
					}
					took = d
				}
			}
		}
		if took < settled+cfg.TakeoverAfter {
			t.Fatalf("claim of epoch 3 at %v, want one at or after %v (settled + takeover_after)", took, settled+cfg.TakeoverAfter)
		}
	})
	// props' TestSingleWriter seed 2070523810: relays that lost their
	// storage hid alice's epoch from bob, who claimed it again and holds
	// it. Retaking would start epoch 3 beside bob's copy; alice yields, and
	// rejoins as bob's standby: it claims nothing while bob holds.
	t.Run("another provider holds its own epoch: fenced, no retake", func(t *testing.T) {
		h, ev := evicted(t)
		cfg := h.m.Config()
		effs := h.hb(ev+20*s, "bob", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		h.wantEffects("ObserveHeartbeat(bob lists w1@1)", effs, "entered w1 evicted -> fenced epoch=1", "entered w1 fenced -> standby epoch=1")
		if ws, _ := h.m.Workload("w1"); ws.Holder != key("bob") || ws.Epoch != 1 {
			t.Fatalf("Workload(w1) holder, epoch = %v, %d, want bob, 1", keyName(ws.Holder), ws.Epoch)
		}
		for d := ev + 60*s; d <= ev+3*cfg.TakeoverAfter; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
				h.hb(d, "bob", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				t.Fatalf("Tick(%v) = %v, want no claim of an epoch another provider holds", d, render(effs))
			}
		}
	})
	t.Run("not while cut off", func(t *testing.T) {
		h, ev := evicted(t)
		for d := ev; d <= ev+6*3600*s; d += 10 * s {
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				t.Fatalf("Tick(%v) = %v, want no retake while its own heartbeats do not come back", d, render(effs))
			}
		}
	})
}
