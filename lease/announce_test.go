package lease

import (
	"testing"
	"time"
)

// announcement is a Paygress promotion announcement (kind 38386 without an
// epoch) by claimer, made at created (zero: unknown).
func announcement(claimer string, created time.Duration, known bool) PromotionClaim {
	c := PromotionClaim{Workload: "w1", Claimer: key(claimer), Epoch: EpochUnknown, Active: true, Relay: "wss://r1.test"}
	if known {
		c.CreatedAt = at(created)
	}
	return c
}

// TestRule9_PaygressAnnouncementFences: an announcement made after we began
// holding (allowing MaxSkew and created_at's one-second resolution) is an
// active claim of the next epoch and fences our copy; older ones, unknown
// times, the holder's own, withdrawn markers and unnamed authors do not.
func TestRule9_PaygressAnnouncementFences(t *testing.T) {
	skew := testConfig().MaxSkew // alice began holding at 0
	tests := []struct {
		name   string
		claim  PromotionClaim
		fenced bool
	}{
		{"made after we began holding", announcement("bob", 200*s, true), true},
		{"made at our start", announcement("bob", 0, true), true},
		{"within max_skew before our start", announcement("bob", -skew+s, true), true},
		{"max_skew plus the second's truncation before", announcement("bob", -skew-s+time.Millisecond, true), true},
		{"more than max_skew plus a second before", announcement("bob", -skew-s, true), false},
		{"stored from an earlier failover", announcement("bob", -time.Hour, true), false},
		{"created_at unknown", announcement("bob", 0, false), false},
		{"withdrawn", func() PromotionClaim { c := announcement("bob", 200*s, true); c.Active = false; return c }(), false},
		{"not named by the lease", announcement("mallory", 200*s, true), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
			effs := h.m.ObserveClaim(at(301*s), tt.claim)
			if tt.fenced {
				h.wantEffects("ObserveClaim("+tt.name+")", effs, "entered w1 live -> fenced epoch=1",
					`stop w1 epoch=1 reason="promotion announced by bob after epoch 1 began"`)
				return
			}
			h.wantEffects("ObserveClaim("+tt.name+")", effs)
			h.wantState("w1", StateLive)
		})
	}
}

// TestRule8_PaygressAnnouncementCompetes: a standby in the claim step for
// epoch 2 that reads an announcement by another standby, made since it
// began watching the holder, counts it as an active claim of epoch 2 and
// withdraws; the holder's own announcement and old ones do not block it.
// Unwithdrawn, the announcement stands until settle, after which the
// standby follows its author at epoch 2 (it runs the workload).
func TestRule8_PaygressAnnouncementCompetes(t *testing.T) {
	tests := []struct {
		name  string
		claim PromotionClaim
		wins  bool
	}{
		{"fresh announcement by another standby", announcement("carol", 90*s, true), false},
		{"announcement by the holder", announcement("alice", 90*s, true), true},
		{"announcement older than the epoch", announcement("carol", -time.Hour, true), true},
		{"created_at unknown", announcement("carol", 0, false), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "bob", nil)
			h.track(0, warmSpec("w1", "alice", "bob", "carol"))
			h.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(100 * s)})
			h.m.ClaimPublished(at(101*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 2})
			rd := 101*s + h.m.Config().RelayDelay
			// The read: the announcement as a relay served it, then the report
			// (a driver counts only epoch-carrying claims in Competing).
			h.wantEffects("ObserveClaim("+tt.name+")", h.m.ObserveClaim(at(rd), tt.claim))
			effs := h.m.ClaimsRead(at(rd), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3})
			if tt.wins {
				h.wantEffects("ClaimsRead("+tt.name+")", effs, "entered w1 promoting -> provisioning epoch=2", "start w1 epoch=2", "announce w1 epoch=2")
				return
			}
			h.wantEffects("ClaimsRead("+tt.name+")", effs, "withdraw w1 epoch=2")
			settled := rd + h.m.Config().ClaimTimeout*2 + h.m.Config().RelayDelay
			for d := rd; d <= settled+60*s; d += 5 * s {
				if effs := h.tick(d); hasEffect[PublishClaim](effs) {
					// a retry before settle reads the announcement again
					h.m.ObserveClaim(at(d), tt.claim)
				}
			}
			w, _ := h.m.Workload("w1")
			if w.State != StateStandby || w.Holder != key("carol") || w.Epoch != 2 {
				t.Fatalf("Workload(after settle) = %s holder %s epoch %d, want standby following carol at 2", w.State, keyName(w.Holder), w.Epoch)
			}
		})
	}
}

// TestPaygressAnnouncementStandbyIgnoresOld: a standby that already follows
// the announcer (it adopted its promotion) ignores the same announcement
// when it is served again, and one older than the current holder's start.
func TestPaygressAnnouncementStandbyIgnoresOld(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	// carol (Paygress) announces at 100 s; bob, a standby, records the rival
	// and follows carol at epoch 2 once it stood for settle.
	h.wantEffects("ObserveClaim(fresh)", h.m.ObserveClaim(at(100*s), announcement("carol", 100*s, true)))
	w, _ := h.m.Workload("w1")
	if len(w.Rivals) != 1 || w.Rivals[0].Epoch != 2 {
		t.Fatalf("Rivals after announcement = %v, want one of epoch 2", w.Rivals)
	}
	h.tick(100*s + 2*h.m.Config().ClaimTimeout + h.m.Config().RelayDelay)
	w, _ = h.m.Workload("w1")
	if w.Holder != key("carol") || w.Epoch != 2 {
		t.Fatalf("Workload(after settle) = holder %s epoch %d, want carol at 2", keyName(w.Holder), w.Epoch)
	}
	h.wantEffects("ObserveClaim(same again)", h.m.ObserveClaim(at(400*s), announcement("carol", 100*s, true)))
	h.wantEffects("ObserveClaim(alice's, old)", h.m.ObserveClaim(at(400*s), announcement("alice", 50*s, true)))
	w, _ = h.m.Workload("w1")
	if w.Epoch != 2 || len(w.Rivals) != 0 {
		t.Fatalf("Workload(after old announcements) = epoch %d rivals %v, want epoch 2, none", w.Epoch, w.Rivals)
	}
}
