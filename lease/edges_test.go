package lease

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Tests of behaviour at the edges of the machine's rules: equalities,
// orders and the conditions each clause adds. Each states what the
// machine promises there.

// TestStandbyFollowsTheHighestSettledRival: of the rival claims that stood
// unwithdrawn for the settle time, a standby follows the one of the highest
// epoch, whichever was seen first.
func TestStandbyFollowsTheHighestSettledRival(t *testing.T) {
	for _, order := range [][]string{{"dave", "carol"}, {"carol", "dave"}} {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob", "carol", "dave"))
		epoch := map[string]uint64{"carol": 2, "dave": 3}
		for i, who := range order {
			h.m.ObserveClaim(at(10*s+time.Duration(i)*s), PromotionClaim{Workload: "w1", Claimer: key(who), Epoch: epoch[who], Active: true})
		}
		h.tick(11*s + h.m.settle())
		if ws, _ := h.m.Workload("w1"); ws.Holder != key("dave") || ws.Epoch != 3 || ws.State != StateStandby {
			t.Fatalf("claims seen in order %v: %s following %s at %d, want a standby following dave at 3", order, ws.State, keyName(ws.Holder), ws.Epoch)
		}
	}
}

// takeoverAt ticks bob every second from 0 to limit, feeding bob's own
// heartbeats (every 60 s on ownRelays) and alice's listing w1 (every 10 s
// on relay r while d <= aliceUntil[r]), and returns when bob first
// publishes a claim (0: never).
func takeoverAt(h *harness, ownRelays []int, aliceUntil map[int]time.Duration, limit time.Duration) time.Duration {
	for d := time.Duration(0); d <= limit; d += s {
		for r, until := range aliceUntil {
			if d%(10*s) == 0 && d <= until {
				h.hb(d, "alice", []int{r}, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
			}
		}
		if d%(60*s) == 0 {
			h.hb(d, "bob", ownRelays, []WorkloadEpoch{})
		}
		if hasEffect[PublishClaim](h.tick(d)) {
			return d
		}
	}
	return 0
}

// TestTakeoverCountsTheRelaysItWatches: the takeover needs the holder's
// silence on N-M+1 relays that the standby watches (its own heartbeats come
// back there); a relay it does not watch neither counts nor stops the
// others from counting; and a holder still listed on the remaining relay
// delays nothing, however the machine sleeps between ticks.
func TestTakeoverCountsTheRelaysItWatches(t *testing.T) {
	ta := testConfig().TakeoverAfter
	t.Run("watching two relays of three", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		if got, want := takeoverAt(h, []int{2, 3}, nil, 2*ta), shownAt(0, ta); got != want {
			t.Fatalf("takeover at %v, want %v (takeover_after of silence on the two relays watched)", got, want)
		}
	})
	t.Run("the holder still listed on one relay", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		got := takeoverAt(h, all3, map[int]time.Duration{1: 290 * s, 2: 290 * s, 3: 600 * s}, 600*s+2*ta)
		if want := shownAt(0, 290*s+ta); got != want {
			t.Fatalf("takeover at %v, want %v (silent on two relays since 290 s)", got, want)
		}
	})
	t.Run("silence is shown up to the last own beat less the relay delay", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		rd := h.m.Config().RelayDelay
		// Own beats at 0 s and then only at ta+rd-1s and ta+rd: the first
		// shows silence up to ta-1s, the second up to ta exactly.
		h.hb(0, "bob", all3, []WorkloadEpoch{})
		h.hb(ta+rd-s, "bob", all3, []WorkloadEpoch{})
		if effs := h.tick(ta + rd - s); hasEffect[PublishClaim](effs) {
			t.Fatalf("Tick(ta+rd-1s) = %v, want no claim (silence shown only up to ta-1s)", render(effs))
		}
		if effs := h.tick(ta + 5*time.Minute); hasEffect[PublishClaim](effs) {
			t.Fatalf("Tick(ta+5min) = %v, want no claim (no own beat since ta+rd-1s shows more)", render(effs))
		}
		h.hb(ta+5*time.Minute, "bob", all3, []WorkloadEpoch{})
		h.wantEffects("Tick(after an own beat created at ta+5min)", h.tick(ta+5*time.Minute), "entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")
	})
	t.Run("a relay gap restarts the silence there", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		gapAt := 600 * s
		var took time.Duration
		for d := time.Duration(0); d <= 3*ta && took == 0; d += s {
			if d == gapAt {
				h.m.RelayGap(at(d), "wss://r1.test")
			}
			if d == gapAt+17*s {
				h.m.RelaySynced(at(d), "wss://r1.test")
			}
			if d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				took = d
			}
		}
		// Silence on r2 and r3 from 0: shown up to ta by the own beat at
		// 780 s, due at ta plus the proof lag. That is enough, so the gap
		// on r1 changes nothing; cut r2 too and it would.
		if want := shownAt(0, ta); took != want {
			t.Fatalf("takeover at %v, want %v", took, want)
		}
		h = newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		took = 0
		for d := time.Duration(0); d <= 3*ta && took == 0; d += s {
			if d == gapAt {
				h.m.RelayGap(at(d), "wss://r1.test")
				h.m.RelayGap(at(d), "wss://r2.test")
			}
			if d == gapAt+17*s {
				h.m.RelaySynced(at(d), "wss://r1.test")
			}
			if d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				took = d
			}
		}
		// r2 stays unwatched; r1 watched again from 617 s: silence shown
		// on r1 and r3 up to 617 s + ta by the own beat at 1380 s, due at
		// 617 s + ta + the proof lag.
		if want := shownAt(0, gapAt+17*s+ta); took != want {
			t.Fatalf("takeover after gaps on r1 (synced again 17 s later) and r2 (not) at %v, want %v", took, want)
		}
	})
	t.Run("own beats served before the stream's sync show nothing", func(t *testing.T) {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		for _, r := range h.m.Relays() {
			h.m.RelayGap(at(0), r)
		}
		for d := time.Duration(0); d <= 2*ta; d += 60 * s {
			h.hb(d, "bob", all3, []WorkloadEpoch{}) // catch-up of a stream never synced
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				t.Fatalf("Tick(%v) = %v, want no claim: no relay is watched", d, render(effs))
			}
		}
	})
	t.Run("one stretch of time in common", func(t *testing.T) {
		// r1 shows silence over [0, 800 s] only (its stream then breaks
		// for good), r2 over [700 s, ...): each is longer than ta, but
		// no stretch of ta lies in both, and r3 carries alice's beats.
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		var took time.Duration
		for d := time.Duration(0); d <= 3*ta && took == 0; d += s {
			if d%(10*s) == 0 {
				h.hb(d, "alice", []int{3}, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
				if d <= 700*s {
					h.hb(d, "alice", []int{2}, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
				}
			}
			if d == 810*s {
				h.m.RelayGap(at(d), "wss://r1.test")
			}
			if d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				took = d
			}
		}
		if took != 0 {
			t.Fatalf("takeover at %v, want none: r1 and r2 show silence over no common stretch of ta", took)
		}
	})
}

// evictedAlice is alice's machine after she held w1 (bob standing by) and
// evicted herself once her heartbeats stopped; it returns when.
func evictedAlice(t *testing.T) (*harness, time.Duration) {
	t.Helper()
	return evictedAliceAt(t, 1)
}

// evictedAliceAt is evictedAlice with w1 granted at epoch.
func evictedAliceAt(t *testing.T, epoch uint64) (*harness, time.Duration) {
	t.Helper()
	spec := warmSpec("w1", "alice", "bob")
	spec.Epoch = epoch
	h := liveAlice(t, spec, 600*s, nil)
	for d := 601 * s; d <= 3600*s; d += s {
		if hasEffect[PublishRevocation](h.tick(d)) {
			h.wantState("w1", StateEvicted)
			return h, d
		}
	}
	t.Fatal("alice never evicted herself")
	return nil, 0
}

// TestRetakeCountsTheRelaysItWatches: the retake needs TakeoverAfter of
// watching on N-M+1 relays; a relay whose own heartbeats do not come back
// neither counts nor stops the others from counting, and one seen exactly
// the watch gap ago is still watched.
func TestRetakeCountsTheRelaysItWatches(t *testing.T) {
	ta := testConfig().TakeoverAfter
	t.Run("watching two relays of three", func(t *testing.T) {
		h, ev := evictedAlice(t)
		back := ev + 60*s
		h.reconnect(back)
		var took time.Duration
		for d := back; d <= back+2*ta && took == 0; d += s {
			if (d-back)%(60*s) == 0 {
				h.hb(d, "alice", []int{2, 3}, []WorkloadEpoch{})
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				took = d
			}
		}
		if want := shownAt(back, back+ta); took != want {
			t.Fatalf("retake claim at %v, want %v", took, want)
		}
	})
	t.Run("a relay gap restarts the watch", func(t *testing.T) {
		h, ev := evictedAlice(t)
		back := ev + 60*s
		h.reconnect(back)
		var took time.Duration
		for d := back; d <= back+3*ta && took == 0; d += s {
			if d == back+300*s {
				h.m.RelayGap(at(d), "wss://r2.test")
			}
			if d == back+310*s {
				h.m.RelaySynced(at(d), "wss://r2.test")
			}
			if (d-back)%(60*s) == 0 {
				h.hb(d, "alice", []int{2, 3}, []WorkloadEpoch{})
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				took = d
			}
		}
		if want := shownAt(back, back+310*s+ta); took != want { // r2 watched again from back+310s
			t.Fatalf("retake claim at %v, want %v (the own beat that shows silence on r2 from back+310s)", took, want)
		}
	})
}

// TestRetakeClaimRetriesUnlessTheClockIsSuspect: a retake claim that failed
// is retried after its backoff; if the clock turned suspect meanwhile, the
// provider stays evicted instead.
func TestRetakeClaimRetriesUnlessTheClockIsSuspect(t *testing.T) {
	for _, suspect := range []bool{false, true} {
		h, ev := evictedAlice(t)
		cfg := h.m.Config()
		back := ev + 60*s
		h.reconnect(back)
		var took time.Duration
		for d := back; d <= back+2*cfg.TakeoverAfter && took == 0; d += s {
			if (d-back)%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				took = d
			}
		}
		h.wantEffects("ClaimPublished(too few)", h.m.ClaimPublished(at(took+s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 1}), "withdraw w1 epoch=2")
		if suspect {
			h.m.SetClockSuspect(at(took+2*s), true, "skew")
		}
		effs := h.tick(took + s + cfg.ClaimBackoff(1, h.m.byID["w1"].rank))
		if suspect {
			h.wantEffects("Tick(backoff over, clock suspect)", effs, "entered w1 promoting -> evicted epoch=1")
		} else {
			h.wantEffects("Tick(backoff over)", effs, "claim w1 epoch=2")
		}
	}
}

// TestClaimOutcomesOfAnotherStepAreIgnored: a claim-step outcome for an
// untracked workload, for another epoch, or repeated after the phase it
// answers has passed changes nothing.
func TestClaimOutcomesOfAnotherStepAreIgnored(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.wantEffects("ClaimPublished(untracked)", h.m.ClaimPublished(at(s), ClaimAck{Workload: "nope", Epoch: 2, Accepted: 3}))
	h.wantEffects("ClaimsRead(untracked)", h.m.ClaimsRead(at(s), ClaimRead{Workload: "nope", Epoch: 2, Relays: 3}))
	h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
	h.wantEffects("ClaimPublished(other epoch)", h.m.ClaimPublished(at(11*s), ClaimAck{Workload: "w1", Epoch: 3, Accepted: 3}))
	h.wantEffects("ClaimPublished", h.m.ClaimPublished(at(11*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3}), "read-claims w1 epoch=2 at=+21s")
	h.wantEffects("ClaimPublished(again, reading)", h.m.ClaimPublished(at(12*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 1}))
	h.wantEffects("ClaimsRead(other epoch)", h.m.ClaimsRead(at(21*s), ClaimRead{Workload: "w1", Epoch: 3, Relays: 3}))
	h.wantEffects("ClaimsRead", h.m.ClaimsRead(at(21*s), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3}),
		"entered w1 promoting -> provisioning epoch=2", "start w1 epoch=2", "announce w1 epoch=2")
}

// TestClockVerdictIsRecordedAsGiven: SetClockSuspect records the verdict
// and its reason (a reason only while suspect), whatever the previous one;
// it aborts only takeover claims, and leaves held workloads and
// revocation claims to the rules that handle them.
func TestClockVerdictIsRecordedAsGiven(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "bob", "alice"))
	h.track(0, warmSpec("w2", "alice", "bob"))
	h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w2", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
	steps := []struct {
		suspect bool
		why     string
		wantWhy string
	}{
		{true, "", ""},
		{true, "skew 40s", "skew 40s"},
		{true, "skew 50s", "skew 50s"},
		{false, "ignored", ""},
		{true, "skew 40s", "skew 40s"},
	}
	for i, st := range steps {
		effs := h.m.SetClockSuspect(at(11*s+time.Duration(i)*s), st.suspect, st.why)
		h.wantEffects("SetClockSuspect", effs)
		if got, why := h.m.ClockSuspect(); got != st.suspect || why != st.wantWhy {
			t.Fatalf("step %d: ClockSuspect() = %v, %q; want %v, %q", i, got, why, st.suspect, st.wantWhy)
		}
	}
	h.wantState("w1", StateProvisioning)
	h.wantState("w2", StatePromoting)
}

// seenOn is when the machine last counted a whole beat of who on relay r
// (1-based).
func seenOn(h *harness, who string, r int) time.Time {
	return h.m.provs[h.m.provIdx[key(who)]].Seen[r-1]
}

// TestShardedBeatNeedsEveryShardOnce: a sharded beat counts only once each
// of its shards 0..Shards-1 arrived; a shard delivered twice, a shard
// number outside that range, or a shard count above MaxShards never stands
// in for a missing one; MaxShards shards are allowed.
func TestShardedBeatNeedsEveryShardOnce(t *testing.T) {
	send := func(h *harness, d time.Duration, shard, shards int) {
		h.m.ObserveHeartbeat(at(d), Heartbeat{Provider: key("alice"), Relay: relayN(1), CreatedAt: at(d), ReceivedAt: at(d),
			Listed: true, Workloads: []WorkloadEpoch{}, Shard: shard, Shards: shards})
	}
	for _, tt := range []struct {
		name   string
		shards int
		sent   []int
		counts bool
	}{
		{"every shard", 3, []int{2, 0, 1}, true},
		{"a shard twice", 3, []int{0, 1, 1}, false},
		{"shard 1 twice of 65", 65, append(seq(64), 1), false},
		{"a shard number equal to the count", 3, []int{0, 1, 3}, false},
		{"a negative shard number", 3, []int{0, -1, 1}, false},
		{"MaxShards shards", MaxShards, seq(MaxShards), true},
		{"more than MaxShards", MaxShards + 1, seq(MaxShards + 1), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "bob", nil)
			h.track(0, warmSpec("w1", "alice", "bob"))
			for _, i := range tt.sent {
				send(h, 10*s, i, tt.shards)
			}
			if got := seenOn(h, "alice", 1); got.Equal(at(10*s)) != tt.counts {
				t.Fatalf("shards %v of %d: alice seen on r1 at %v, want counted %v", tt.sent, tt.shards, got, tt.counts)
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestHeartbeatReceiptTimeIsNeverLater: a heartbeat counts as received at
// its ReceivedAt when the relay delivered it earlier than the step, at the
// step's time when ReceivedAt is unknown or later.
func TestHeartbeatReceiptTimeIsNeverLater(t *testing.T) {
	for _, tt := range []struct {
		name string
		recv time.Time
		want time.Time
	}{
		{"earlier", at(95 * s), at(95 * s)},
		{"unknown", time.Time{}, at(100 * s)},
		{"later", at(105 * s), at(100 * s)},
	} {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob"))
		h.m.ObserveHeartbeat(at(100*s), Heartbeat{Provider: key("alice"), Relay: relayN(2), CreatedAt: at(90 * s), ReceivedAt: tt.recv, Listed: true})
		if got := seenOn(h, "alice", 2); !got.Equal(tt.want) {
			t.Fatalf("%s ReceivedAt: seen at %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestHeartbeatListingsEachCount: every workload a heartbeat lists is
// handled on its own: one this provider does not track, or one whose lease
// does not name the sender, is skipped without hiding the others, and an
// epoch up to MaxEpoch is followed.
func TestHeartbeatListingsEachCount(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	h.track(0, warmSpec("w2", "alice", "bob"))
	h.track(0, warmSpec("w9", "mallory", "bob"))
	h.hb(10*s, "carol", []int{1}, []WorkloadEpoch{{ID: "nope", Epoch: 1}, {ID: "w1", Epoch: 2}})
	if ws, _ := h.m.Workload("w1"); ws.Holder != key("carol") || ws.Epoch != 2 {
		t.Fatalf("after carol listed an untracked workload, then w1 at 2: w1 held by %s at %d, want carol at 2", keyName(ws.Holder), ws.Epoch)
	}
	h.hb(11*s, "mallory", []int{1}, []WorkloadEpoch{{ID: "w2", Epoch: 5}})
	if ws, _ := h.m.Workload("w2"); ws.Holder != key("alice") || ws.Epoch != 1 {
		t.Fatalf("after mallory (not named by w2's lease) listed w2 at 5: held by %s at %d, want alice at 1", keyName(ws.Holder), ws.Epoch)
	}
	h.hb(12*s, "alice", []int{1}, []WorkloadEpoch{{ID: "w2", Epoch: MaxEpoch}})
	if ws, _ := h.m.Workload("w2"); ws.Epoch != MaxEpoch {
		t.Fatalf("after alice listed w2 at MaxEpoch: epoch %d, want %d", ws.Epoch, uint64(MaxEpoch))
	}
}

// TestQuorumUntilIsTheMthNewestBeat: a provider's quorum lasts until the
// M-th most recent relay on which its beat was seen turns stale, for every
// M and every order of the relays' times.
func TestQuorumUntilIsTheMthNewestBeat(t *testing.T) {
	times := []time.Duration{0, 30 * s, 10 * s, 50 * s, 20 * s} // 0: never seen
	for mq := 1; mq <= 5; mq++ {
		for rot := range times {
			cfg := testConfig()
			cfg.Relays, cfg.N, cfg.M = testRelays(5), 5, mq
			m, err := New(cfg, key("bob"))
			if err != nil {
				t.Fatal(err)
			}
			p := &m.provs[m.selfIdx]
			var seen []time.Time
			for i := range times {
				d := times[(i+rot)%len(times)]
				if d > 0 {
					p.Seen[i] = at(d)
					seen = append(seen, at(d))
				}
			}
			m.updateQuorum(p)
			slices.SortFunc(seen, func(a, b time.Time) int { return b.Compare(a) })
			var want time.Time
			if mq <= len(seen) {
				want = seen[mq-1].Add(cfg.Stale)
			}
			if !p.QuorumUntil.Equal(want) {
				t.Fatalf("M=%d, seen %v: QuorumUntil %v, want %v", mq, p.Seen, p.QuorumUntil, want)
			}
		}
	}
}

// rivals lists w1's rival claims as "name@epoch".
func rivals(h *harness) []string {
	ws, _ := h.m.Workload("w1")
	var out []string
	for _, r := range ws.Rivals {
		out = append(out, fmt.Sprintf("%s@%d", keyName(r.Claimer), r.Epoch))
	}
	return out
}

// TestRivalClaimsStandUntilWithdrawn: a standby keeps each rival's latest
// active claim until that claimer withdraws that epoch or a heartbeat shows
// a holder at or above it; a marker for another epoch, another claimer's
// withdrawal, an older version of a claim event, or the standby's own claim
// echoed back removes or adds nothing.
func TestRivalClaimsStandUntilWithdrawn(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol", "dave"))
	claim := func(d time.Duration, who string, epoch uint64, active bool) {
		h.m.ObserveClaim(at(d), PromotionClaim{Workload: "w1", Claimer: key(who), Epoch: epoch, Active: active, CreatedAt: at(d)})
	}
	want := func(step string, rs ...string) {
		t.Helper()
		if got := rivals(h); !slices.Equal(got, rs) {
			t.Fatalf("%s: rivals %v, want %v", step, got, rs)
		}
	}
	claim(10*s, "dave", 3, true)
	claim(11*s, "carol", 2, true)
	want("two claims", "dave@3", "carol@2")
	claim(12*s, "carol", 3, false)
	want("carol withdraws an epoch she did not claim", "dave@3", "carol@2")
	claim(13*s, "carol", 2, false)
	want("carol withdraws epoch 2", "dave@3")
	h.m.ObserveClaim(at(14*s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: 2, Active: true, CreatedAt: at(11 * s)})
	want("carol's older active claim re-served", "dave@3")
	h.hb(15*s, "carol", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
	want("carol heard holding epoch 2", "dave@3")
	claim(16*s, "bob", 4, true)
	want("bob's own claim echoed", "dave@3")
	h.hb(17*s, "dave", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 3}})
	want("dave heard holding epoch 3")
}

// TestClaimsAtTheEpochBound: a claim up to MaxEpoch fences a holder; claims
// above it, claims for untracked or ended workloads and announcements at
// MaxEpoch are ignored.
func TestClaimsAtTheEpochBound(t *testing.T) {
	h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
	h.wantEffects("claim of an untracked workload", h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "nope", Claimer: key("bob"), Epoch: 2, Active: true}))
	h.wantEffects("claim above MaxEpoch", h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: MaxEpoch + 1, Active: true}))
	h.wantEffects("claim at MaxEpoch", h.m.ObserveClaim(at(302*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: MaxEpoch, Active: true}),
		"entered w1 live -> fenced epoch=1", fmt.Sprintf(`stop w1 epoch=1 reason="epoch %d claimed by bob"`, uint64(MaxEpoch)))

	sb := newHarness(t, "bob", nil)
	sb.track(0, warmSpec("w1", "alice", "bob", "carol"))
	sb.hb(10*s, "alice", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: MaxEpoch}})
	sb.m.ObserveClaim(at(20*s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: EpochUnknown, Active: true, CreatedAt: at(20 * s)})
	if got := rivals(sb); len(got) != 0 {
		t.Fatalf("announcement while following epoch MaxEpoch: rivals %v, want none", got)
	}

	ex := newHarness(t, "bob", nil)
	spec := warmSpec("w1", "alice", "bob")
	spec.ExpiresAt = at(time.Minute)
	ex.track(0, spec)
	ex.tick(time.Minute)
	ex.wantState("w1", StateExpired)
	ex.wantEffects("claim of an expired workload", ex.m.ObserveClaim(at(2*time.Minute), PromotionClaim{Workload: "w1", Claimer: key("alice"), Epoch: 2, Active: true}))
	if got := rivals(ex); len(got) != 0 {
		t.Fatalf("claim of an expired workload: rivals %v, want none", got)
	}
}

// TestHeartbeatRelaySpellings: a heartbeat counts on the relay it names in
// any spelling of that relay's URL; one from a relay outside the set counts
// nowhere.
func TestHeartbeatRelaySpellings(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.m.ObserveHeartbeat(at(10*s), Heartbeat{Provider: key("alice"), Relay: "wss://elsewhere.test", CreatedAt: at(10 * s), ReceivedAt: at(10 * s)})
	for r := 1; r <= 3; r++ {
		if got := seenOn(h, "alice", r); !got.IsZero() {
			t.Fatalf("after a beat from a relay outside the set: seen on r%d at %v, want never", r, got)
		}
	}
	h.m.ObserveHeartbeat(at(20*s), Heartbeat{Provider: key("alice"), Relay: "WSS://R1.test:443/", CreatedAt: at(20 * s), ReceivedAt: at(20 * s)})
	if got := seenOn(h, "alice", 1); !got.Equal(at(20 * s)) {
		t.Fatalf("after a beat from WSS://R1.test:443/: seen on r1 at %v, want %v", got, at(20*s))
	}
	if got := seenOn(h, "alice", 2); !got.IsZero() {
		t.Fatalf("after a beat from WSS://R1.test:443/: seen on r2 at %v, want never", got)
	}
}

// TestRevocationsThatStartNoClaim: a revocation starts the claim step only
// at the standby it names, from the holder at its epoch, made under the
// current grant (up to MaxSkew plus one second before it: the edge counts);
// the holder's own revocation echoed back and revocations of untracked or
// ended workloads change nothing.
func TestRevocationsThatStartNoClaim(t *testing.T) {
	cfg := testConfig()
	rev := func(successor string, created time.Time) Revocation {
		return Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key(successor), QuorumAt: at(100 * s), CreatedAt: created}
	}
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	h.wantEffects("untracked", h.m.ObserveRevocation(at(100*s), Revocation{Workload: "nope", Signer: key("alice"), Epoch: 1, Successor: key("bob")}))
	h.wantEffects("naming carol", h.m.ObserveRevocation(at(100*s), rev("carol", time.Time{})))
	h.wantState("w1", StateStandby)
	edge := t0.Add(-cfg.MaxSkew - s)
	h.wantEffects("made before the grant", h.m.ObserveRevocation(at(100*s), rev("bob", edge.Add(-1))))
	h.wantState("w1", StateStandby)
	h.wantEffects("made at the edge of the grant's skew", h.m.ObserveRevocation(at(100*s), rev("bob", edge)), "entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")

	own := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
	own.wantEffects("own revocation", own.m.ObserveRevocation(at(301*s), rev("bob", time.Time{})))
	if ws, _ := own.m.Workload("w1"); ws.Revoked {
		t.Fatalf("the holder's own revocation echoed back marked w1 revoked")
	}
	ex := newHarness(t, "bob", nil)
	spec := warmSpec("w1", "alice", "bob")
	spec.ExpiresAt = at(time.Minute)
	ex.track(0, spec)
	ex.tick(time.Minute)
	ex.wantEffects("revocation of an expired workload", ex.m.ObserveRevocation(at(2*time.Minute), rev("bob", time.Time{})))
	if ws, _ := ex.m.Workload("w1"); ws.Revoked {
		t.Fatalf("a revocation of an expired workload marked it revoked")
	}
	drift := cfg.TakeoverAfter / 1_000_000 * (2 * MaxDriftPPM)
	if got, want := h.m.RevocationDeadline(Revocation{Workload: "nope", Signer: key("alice"), QuorumAt: at(100 * s)}), at(100*s+cfg.TakeoverAfter-cfg.MaxSkew-drift); !got.Equal(want) {
		t.Fatalf("RevocationDeadline(untracked workload) = %v, want %v (from its QuorumAt)", got, want)
	}
}

// TestMthNewest: the m-th newest of a set of times, zero times ignored, is
// what sorting them says, for every m and order; zero when fewer than m.
func TestMthNewest(t *testing.T) {
	base := []time.Duration{0, 30 * s, 10 * s, 0, 50 * s, 20 * s}
	for m := 1; m <= len(base); m++ {
		for rot := range base {
			var times, set []time.Time
			for i := range base {
				d := base[(i+rot)%len(base)]
				if d == 0 {
					times = append(times, time.Time{})
					continue
				}
				times = append(times, at(d))
				set = append(set, at(d))
			}
			slices.SortFunc(set, func(a, b time.Time) int { return b.Compare(a) })
			var want time.Time
			if m <= len(set) {
				want = set[m-1]
			}
			if got := mthNewest(times, m); !got.Equal(want) {
				t.Fatalf("mthNewest(%v, %d) = %v, want %v", times, m, got, want)
			}
		}
	}
}

// TestUnlistedQuorumCountsOnlyUnlistedBeats: a Paygress peer's quorum time
// is the M-th newest created_at over the relays whose newest counting
// heartbeat was unlisted; a relay whose newest was listed (an unlisted one
// before it or not) does not count, and does not stop the others counting.
func TestUnlistedQuorumCountsOnlyUnlistedBeats(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	p := &h.m.provs[h.m.provIdx[key("alice")]]
	p.Seen = []time.Time{at(26 * s), at(20 * s), at(30 * s)}
	p.Unlisted = []time.Time{at(5 * s), at(20 * s), at(30 * s)}
	p.Created = []time.Time{at(25 * s), at(19 * s), at(29 * s)}
	if got := h.m.unlistedQuorum(p); !got.Equal(at(19 * s)) {
		t.Fatalf("unlistedQuorum = %v, want %v (r2 and r3 were unlisted; r1's newest was listed)", got, at(19*s))
	}
}

// TestAfterHeldPerWorkload: once held steps persist, each workload whose
// start was held is started if the machine still holds it running, whatever
// became of the workloads before it; held claim-step requests or respawns
// alone are re-issued; a workload forgotten meanwhile gets nothing.
func TestAfterHeldPerWorkload(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("gone", "bob", "alice"))
	h.track(0, warmSpec("run", "bob", "alice"))
	h.track(0, warmSpec("released", "bob", "alice"))
	h.track(0, warmSpec("claim", "alice", "bob"))
	h.m.ObserveClaim(at(11*s), PromotionClaim{Workload: "gone", Claimer: key("alice"), Epoch: 2, Active: true}) // fences "gone"
	h.m.Remove("released")
	h.wantEffects("AfterHeld(starts)", h.m.AfterHeld([]Effect{
		StartWorkload{ID: "gone", Epoch: 1},
		StartWorkload{ID: "released", Epoch: 1},
		StartWorkload{ID: "run", Epoch: 1},
		StopWorkload{ID: "gone", Epoch: 1},
	}), "start run epoch=1")
	h.m.ObserveRevocation(at(12*s), Revocation{Workload: "claim", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(12 * s)})
	h.wantEffects("AfterHeld(a claim request alone)", h.m.AfterHeld([]Effect{PublishClaim{ID: "claim", Epoch: 2}}), "claim claim epoch=2")

	r := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
	r.m.ProcessExited(at(301*s), ProcessExit{Workload: "w1", Epoch: 1})
	var respawn []Effect
	for d := 301 * s; d <= 400*s && len(respawn) == 0; d += s {
		for _, e := range r.tick(d) {
			if _, ok := e.(AttemptRespawn); ok {
				respawn = append(respawn, e)
			}
		}
	}
	if len(respawn) != 1 {
		t.Fatalf("no respawn issued within 100 s of the exit")
	}
	r.wantEffects("AfterHeld(a respawn alone)", r.m.AfterHeld(respawn), render(respawn))
}

// TestQuorumWithEveryRelay: with MaxRelays relays and M = MaxRelays, quorum
// lasts until the oldest relay's beat turns stale.
func TestQuorumWithEveryRelay(t *testing.T) {
	cfg := testConfig()
	cfg.Relays, cfg.N, cfg.M = testRelays(MaxRelays), MaxRelays, MaxRelays
	m, err := New(cfg, key("bob"))
	if err != nil {
		t.Fatal(err)
	}
	p := &m.provs[m.selfIdx]
	for i := range p.Seen {
		p.Seen[i] = at(time.Duration(MaxRelays-i) * s)
	}
	m.updateQuorum(p)
	if want := at(s + cfg.Stale); !p.QuorumUntil.Equal(want) {
		t.Fatalf("QuorumUntil = %v, want %v", p.QuorumUntil, want)
	}
	if got := mthNewest(p.Seen, MaxRelays); !got.Equal(at(s)) {
		t.Fatalf("mthNewest(%d times, %d) = %v, want %v", MaxRelays, MaxRelays, got, at(s))
	}
}

// respawned is alice's machine after w1 (at most one respawn in a row)
// exited once while Live and was respawned: Live again since the returned
// time.
func respawned(t *testing.T) (*harness, time.Duration) {
	t.Helper()
	spec := warmSpec("w1", "alice", "bob")
	spec.RestartPolicy.MaxAttempts = 1
	h := liveAlice(t, spec, 300*s, nil)
	h.m.ProcessExited(at(301*s), ProcessExit{Workload: "w1", Epoch: 1})
	due := 301*s + h.m.Config().RestartBackoff(1)
	if effs := h.tick(due); len(respawns(effs)) != 1 {
		t.Fatalf("Tick(respawn due) = %v, want the respawn", render(effs))
	}
	h.m.RespawnDone(at(due), RespawnResult{Workload: "w1", Attempt: 1, OK: true})
	h.wantState("w1", StateLive)
	return h, due
}

// TestRespawnCounterResetsAfterRestartResetAfterLive: a workload Live for
// RestartResetAfter since its respawn may be respawned again even if no
// Tick came between (the exit itself resets the count); one that exits
// sooner has used its attempts; an exit of an untracked workload or a
// respawn result for one changes nothing.
func TestRespawnCounterResetsAfterRestartResetAfterLive(t *testing.T) {
	h, live := respawned(t)
	h.wantEffects("Tick(Live with quorum, soon after the respawn)", h.tick(live+s))
	h.wantEffects("exit soon after the respawn", h.m.ProcessExited(at(live+2*s), ProcessExit{Workload: "w1", Epoch: 1}),
		"entered w1 live -> failed epoch=1",
		`stop w1 epoch=1 reason="process exited (); 1 respawn attempts exhausted"`,
		`revoke w1 epoch=1 successor=bob standbys=[bob] quorum_at=+5m0s reason="process exited (); 1 respawn attempts exhausted"`,
		`failed w1 epoch=1 reason="process exited (); 1 respawn attempts exhausted"`)
	h, live = respawned(t)
	h.wantEffects("exit RestartResetAfter after the respawn", h.m.ProcessExited(at(live+h.m.Config().RestartResetAfter), ProcessExit{Workload: "w1", Epoch: 1}),
		"entered w1 live -> respawning epoch=1")
	h.wantEffects("exit of an untracked workload", h.m.ProcessExited(at(live+time.Hour), ProcessExit{Workload: "nope", Epoch: 1}))
	h.wantEffects("respawn result of an untracked workload", h.m.RespawnDone(at(live+time.Hour), RespawnResult{Workload: "nope", Attempt: 1, OK: true}))
}

// TestRelaySyncResumesEveryWorkload: once M relays synced after a restart,
// every restored workload is handled, in any order: provisioning ones are
// started again and held ones resume and are started again.
func TestRelaySyncResumesEveryWorkload(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.track(0, warmSpec("w2", "alice", "bob"))
	h.beat("alice", 0, 300*s, 60*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}, {ID: "w2", Epoch: 1}})
	h.wantState("w2", StateLive)
	snap := roundTrip(t, h.m.Snapshot())
	snap.Workloads[0].State = StateProvisioning // w1 restored before it reached quorum
	m, _, err := Restore(at(310*s), h.m.Config(), snap)
	if err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	h.m = m
	h.wantEffects("RelaySynced(r1)", h.m.RelaySynced(at(311*s), relayN(1)))
	h.wantEffects("RelaySynced(r2)", h.m.RelaySynced(at(312*s), relayN(2)),
		"start w1 epoch=1", "entered w2 syncing -> live epoch=1", "start w2 epoch=1")
}

// TestRestoreRefusesInconsistentSnapshots: Restore accepts a snapshot at
// every documented bound and refuses one that breaks any single rule.
func TestRestoreRefusesInconsistentSnapshots(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	h.hb(10*s, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	h.hb(10*s, "bob", all3, []WorkloadEpoch{})
	base := h.m.Snapshot()
	rivals := func(n int) []RivalClaim {
		out := make([]RivalClaim, n)
		for i := range out {
			out[i] = RivalClaim{Claimer: key("carol"), Epoch: 2, SeenAt: at(s)}
		}
		return out
	}
	holders := func(n int) []EpochHolder {
		out := make([]EpochHolder, n)
		for i := range out {
			out[i] = EpochHolder{Epoch: uint64(i + 1), Holder: key("alice"), From: at(s)}
		}
		return out
	}
	marks := func(n int) []ClaimMark {
		out := make([]ClaimMark, n)
		for i := range out {
			out[i] = ClaimMark{Claimer: key("carol"), CreatedAt: at(s)}
		}
		return out
	}
	for _, tt := range []struct {
		name string
		mod  func(p *ProviderSnapshot, w *WorkloadSnapshot)
		ok   bool
	}{
		{"as taken", func(*ProviderSnapshot, *WorkloadSnapshot) {}, true},
		{"no complete beats kept", func(p *ProviderSnapshot, _ *WorkloadSnapshot) { p.Complete = nil }, true},
		{"seen of the wrong size", func(p *ProviderSnapshot, _ *WorkloadSnapshot) { p.Seen = p.Seen[:2] }, false},
		{"created of the wrong size", func(p *ProviderSnapshot, _ *WorkloadSnapshot) { p.Created = p.Created[:2] }, false},
		{"unlisted of the wrong size", func(p *ProviderSnapshot, _ *WorkloadSnapshot) { p.Unlisted = p.Unlisted[:2] }, false},
		{"complete of the wrong size", func(p *ProviderSnapshot, _ *WorkloadSnapshot) { p.Complete = make([]time.Time, 2) }, false},
		{"an unknown state", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.State = "bogus" }, false},
		{"a standby with a claim phase", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Phase = PhasePublishing }, false},
		{"promoting to epoch+1", func(_ *ProviderSnapshot, w *WorkloadSnapshot) {
			w.State, w.Phase, w.Target, w.Trigger = StatePromoting, PhaseBackoff, 2, TriggerTakeover
		}, true},
		{"promoting to epoch+2", func(_ *ProviderSnapshot, w *WorkloadSnapshot) {
			w.State, w.Phase, w.Target, w.Trigger = StatePromoting, PhaseBackoff, 3, TriggerTakeover
		}, false},
		{"epoch 0", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Epoch = 0 }, false},
		{"epoch MaxEpoch", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Epoch = MaxEpoch }, true},
		{"epoch above MaxEpoch", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Epoch = MaxEpoch + 1 }, false},
		{"negative attempts", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Attempts = -1 }, false},
		{"a rival per other provider", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Rivals = rivals(3) }, true},
		{"more rivals than providers", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Rivals = rivals(4) }, false},
		{"a claim mark per other provider", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.ClaimMarks = marks(3) }, true},
		{"more claim marks than providers", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.ClaimMarks = marks(4) }, false},
		{"syncing to resume live", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.State, w.Resume = StateSyncing, StateLive }, true},
		{"syncing to resume suspect", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.State, w.Resume = StateSyncing, StateSuspect }, true},
		{"syncing to resume standby", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.State, w.Resume = StateSyncing, StateStandby }, false},
		{"a restore running while provisioning under a policy", func(_ *ProviderSnapshot, w *WorkloadSnapshot) {
			w.State, w.Restore, w.Spec.Checkpoint = StateProvisioning, RestoreRunning, &CheckpointPolicy{}
		}, true},
		{"a restore running with no policy", func(_ *ProviderSnapshot, w *WorkloadSnapshot) {
			w.State, w.Restore = StateProvisioning, RestoreRunning
		}, false},
		{"a restore waiting in standby", func(_ *ProviderSnapshot, w *WorkloadSnapshot) {
			w.Restore, w.Spec.Checkpoint = RestoreWaiting, &CheckpointPolicy{}
		}, false},
		{"a restore done in standby", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Restore = RestoreDone }, true},
		{"as many epoch holders as kept", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Holders = holders(maxHolders) }, true},
		{"more epoch holders than kept", func(_ *ProviderSnapshot, w *WorkloadSnapshot) { w.Holders = holders(maxHolders + 1) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := roundTrip(t, base)
			tt.mod(&snap.Providers[0], &snap.Workloads[0])
			_, _, err := Restore(at(20*s), h.m.Config(), snap)
			if (err == nil) != tt.ok {
				t.Fatalf("Restore(%s) = %v, want accepted %v", tt.name, err, tt.ok)
			}
		})
	}
}

// TestRespawningEvictsAtTheDeadline: a workload whose process exited while
// its holder lacked quorum is evicted at T1+T2 after the quorum loss even
// if its respawn falls due later, however the machine sleeps between
// ticks.
func TestRespawningEvictsAtTheDeadline(t *testing.T) {
	h := liveAlice(t, warmSpec("w1", "alice", "bob"), 300*s, nil)
	cfg := h.m.Config()
	lost := 300*s + cfg.Stale
	deadline := lost + cfg.T1 + cfg.T2
	h.tick(lost + cfg.T1)
	h.wantState("w1", StateSuspect)
	h.m.ProcessExited(at(deadline-s), ProcessExit{Workload: "w1", Epoch: 1})
	h.wantState("w1", StateRespawning)
	h.tick(deadline - s)
	if effs := h.tick(deadline); h.state("w1") != StateEvicted {
		t.Fatalf("Tick(T1+T2 after quorum loss, respawn due %v later) = %v, want the eviction", cfg.RestartBackoff(1)-s, render(effs))
	}
}

// TestProvisioningWaitsForQuorum: a workload started here waits in
// Provisioning for relay quorum (until ProvisionTimeout); a tick without
// quorum changes nothing before that.
func TestProvisioningWaitsForQuorum(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.wantEffects("Tick(no quorum yet)", h.tick(s))
	h.wantEffects("Tick(just before the provision timeout)", h.tick(h.m.Config().ProvisionTimeout-s))
	h.wantState("w1", StateProvisioning)
}

// TestStandbyAliveCountsTheFormerPrimary: after a failover the former
// primary stands by for the new holder: while its heartbeats arrive,
// StandbyAlive is true.
func TestStandbyAliveCountsTheFormerPrimary(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.m.ObserveRevocation(at(10*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(10 * s)})
	claimStep(h, 11*s, 2)
	h.wantState("w1", StateProvisioning)
	if h.m.StandbyAlive("w1") {
		t.Fatalf("StandbyAlive(w1) before alice was heard = true, want false")
	}
	h.hb(30*s, "alice", []int{1}, []WorkloadEpoch{})
	if !h.m.StandbyAlive("w1") {
		t.Fatalf("StandbyAlive(w1) with the former primary's heartbeats arriving = false, want true")
	}
}

// TestTakeoverClaimStopsWhenTheHolderSpeaks: a takeover claim that failed
// is not retried if the holder's heartbeats came back during the backoff:
// the standby stands by again.
func TestTakeoverClaimStopsWhenTheHolderSpeaks(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	ta := h.m.Config().TakeoverAfter
	took := takeoverAt(h, all3, nil, 2*ta)
	if want := shownAt(0, ta); took != want {
		t.Fatalf("takeover at %v, want %v", took, want)
	}
	h.wantEffects("ClaimPublished(too few)", h.m.ClaimPublished(at(took+s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 1}), "withdraw w1 epoch=2")
	h.hb(took+2*s, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	h.wantEffects("Tick(backoff over, the holder spoke)", h.tick(took+s+h.m.Config().ClaimBackoff(1, 0)), "entered w1 promoting -> standby epoch=1")
}

// TestNoRetakeWhileTheClockIsSuspectOrUnsynced: an evicted former holder
// retakes only with a trusted clock and once its relays synced after a
// restart.
func TestNoRetakeWhileTheClockIsSuspectOrUnsynced(t *testing.T) {
	for _, why := range []string{"clock suspect", "restarted, relays not synced"} {
		h, ev := evictedAlice(t)
		ta := h.m.Config().TakeoverAfter
		if why == "clock suspect" {
			h.m.SetClockSuspect(at(ev+s), true, "skew")
		} else {
			restoreJSON(t, h, ev+s)
		}
		back := ev + 60*s
		if why == "clock suspect" {
			h.reconnect(back) // (a restored machine watches nothing before its sync)
		}
		for d := back; d <= back+2*ta; d += s {
			if (d-back)%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
			}
			if effs := h.tick(d); len(effs) > 0 {
				t.Fatalf("%s: Tick(%v) = %v, want no retake", why, d, render(effs))
			}
		}
	}
}

// TestRemoveKeepsTheOthers: removing a workload leaves every other one
// tracked and ticking.
func TestRemoveKeepsTheOthers(t *testing.T) {
	h := newHarness(t, "alice", nil)
	for _, id := range []string{"w1", "w2", "w3"} {
		h.track(0, warmSpec(id, "alice", "bob"))
	}
	if !h.m.Remove("w1") {
		t.Fatal("Remove(w1) = false")
	}
	h.beat("alice", 0, 60*s, 60*s, []WorkloadEpoch{{ID: "w2", Epoch: 1}, {ID: "w3", Epoch: 1}})
	h.wantState("w2", StateLive)
	h.wantState("w3", StateLive)
	if got := h.m.IDs(); !slices.Equal(got, []string{"w2", "w3"}) {
		t.Fatalf("IDs() after Remove(w1) = %v, want [w2 w3]", got)
	}
}

// TestOneRivalEntryPerClaimer: a claimer's newer claim replaces its entry
// among the rivals, wherever that entry stands.
func TestOneRivalEntryPerClaimer(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol", "dave"))
	h.m.ObserveClaim(at(10*s), PromotionClaim{Workload: "w1", Claimer: key("dave"), Epoch: 3, Active: true, CreatedAt: at(10 * s)})
	h.m.ObserveClaim(at(11*s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: 2, Active: true, CreatedAt: at(11 * s)})
	h.m.ObserveClaim(at(12*s), PromotionClaim{Workload: "w1", Claimer: key("carol"), Epoch: 4, Active: true, CreatedAt: at(12 * s)})
	if got := rivals(h); !slices.Equal(got, []string{"dave@3", "carol@4"}) {
		t.Fatalf("rivals %v, want [dave@3 carol@4]", got)
	}
}

// TestSuspectTimeEarnsNoRespawnReset: the respawn count resets only after
// RestartResetAfter healthy in Live; a workload that exits while Suspect
// (its quorum lost) has used its attempts, however long ago its respawn
// was.
func TestSuspectTimeEarnsNoRespawnReset(t *testing.T) {
	spec := warmSpec("w1", "alice", "bob")
	spec.RestartPolicy.MaxAttempts = 1
	h := liveAlice(t, spec, 300*s, func(c *Config) { c.RestartResetAfter = 200 * s })
	cfg := h.m.Config()
	h.m.ProcessExited(at(301*s), ProcessExit{Workload: "w1", Epoch: 1})
	due := 301*s + cfg.RestartBackoff(1)
	h.tick(due)
	h.m.RespawnDone(at(due), RespawnResult{Workload: "w1", Attempt: 1, OK: true})
	h.wantState("w1", StateLive)
	lost := 300*s + cfg.Stale
	h.tick(lost + cfg.T1)
	h.wantState("w1", StateSuspect)
	effs := h.m.ProcessExited(at(lost+cfg.T1+s), ProcessExit{Workload: "w1", Epoch: 1})
	if h.state("w1") != StateFailed {
		t.Fatalf("exit while Suspect, %v after the respawn = %v, want the workload failed (attempts used)", lost+cfg.T1+s-due, render(effs))
	}
}

// TestProvisionTimeoutWithoutStandby: a workload without a standby that
// never reaches quorum fails at ProvisionTimeout, even when that is T1+T2
// (the longest allowed): quorum loss does not evict a workload nobody else
// may run.
func TestProvisionTimeoutWithoutStandby(t *testing.T) {
	h := newHarness(t, "alice", func(c *Config) { c.ProvisionTimeout = c.T1 + c.T2 })
	h.track(0, warmSpec("w1", "alice"))
	h.tick(h.m.Config().ProvisionTimeout)
	h.wantState("w1", StateFailed)
}

// TestOneEventBeatIgnoresItsShardNumber: a heartbeat with Shards 0 or 1 is
// a whole beat (input.go), whatever its Shard says.
func TestOneEventBeatIgnoresItsShardNumber(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.m.ObserveHeartbeat(at(10*s), Heartbeat{Provider: key("alice"), Relay: relayN(1), CreatedAt: at(10 * s), ReceivedAt: at(10 * s), Shard: 2, Shards: 1})
	if got := seenOn(h, "alice", 1); !got.Equal(at(10 * s)) {
		t.Fatalf("one-event beat with shard number 2: seen at %v, want %v", got, at(10*s))
	}
}

// TestTickResetsTheRespawnCountOnTime: Tick zeroes the respawn count once
// the workload has been Live with quorum for RestartResetAfter since its
// respawn (rule 5), at that tick, however the machine sleeps between
// ticks.
func TestTickResetsTheRespawnCountOnTime(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	beats := func(from, to time.Duration) {
		for d := from; d <= to; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
			}
			h.tick(d)
		}
	}
	beats(0, 300*s)
	h.m.ProcessExited(at(301*s), ProcessExit{Workload: "w1", Epoch: 1})
	due := 301*s + h.m.Config().RestartBackoff(1)
	beats(301*s, due)
	h.m.RespawnDone(at(due), RespawnResult{Workload: "w1", Attempt: 1, OK: true})
	h.wantState("w1", StateLive)
	reset := due + h.m.Config().RestartResetAfter
	beats(due+s, reset-s)
	if w, _ := h.m.Workload("w1"); w.Attempts != 1 {
		t.Fatalf("attempts just before RestartResetAfter Live = %d, want 1", w.Attempts)
	}
	beats(reset, reset)
	if w, _ := h.m.Workload("w1"); w.Attempts != 0 {
		t.Fatalf("attempts at RestartResetAfter Live = %d, want 0", w.Attempts)
	}
}

// TestNoRetakeBesideALowerEpochHolder (props TestLateDeliveries, 20,000-check
// run, seed 18112694129426729116): relays that lost their storage erased
// alice's epochs, bob reused a lower epoch number and holds the workload.
// Alice, evicted at a higher epoch, hears bob list it at that lower epoch:
// she does not retake while bob beats, nor until takeover_after after his
// last beat (his own eviction is timed from it), and a retake claim already
// in flight when bob is heard withdraws. Alice keeps her epoch and is not
// fenced (bob yields to her epoch when he hears it).
func TestNoRetakeBesideALowerEpochHolder(t *testing.T) {
	ta := testConfig().TakeoverAfter
	evicted := func(t *testing.T) (*harness, time.Duration) { t.Helper(); return evictedAliceAt(t, 3) }
	t.Run("retake timed from the lower holder's last beat", func(t *testing.T) {
		h, ev := evicted(t)
		back := ev + 60*s
		h.reconnect(back)
		last := back + 2*ta // bob's last beat
		var took time.Duration
		for d := back; d <= last+2*ta && took == 0; d += s {
			if (d-back)%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
				if d <= last {
					h.hb(d, "bob", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
				}
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				took = d
			}
		}
		if want := shownAt(back, last+ta); took != want {
			t.Fatalf("retake claim at %v, want %v (bob's last beat at epoch 2 + takeover_after)", took, want)
		}
		if ws, _ := h.m.Workload("w1"); ws.Epoch != 3 || ws.Target != 4 {
			t.Fatalf("retake claims epoch %d from epoch %d, want 4 from 3", ws.Target, ws.Epoch)
		}
	})
	// retakeClaim runs alice's retake up to its claim and returns when.
	retakeClaim := func(t *testing.T) (*harness, time.Duration) {
		t.Helper()
		h, ev := evicted(t)
		back := ev + 60*s
		h.reconnect(back)
		for d := back; d <= back+2*ta; d += s {
			if (d-back)%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
			}
			if hasEffect[PublishClaim](h.tick(d)) {
				return h, d
			}
		}
		t.Fatal("alice never retook")
		return nil, 0
	}
	t.Run("a retake claim in flight withdraws", func(t *testing.T) {
		h, took := retakeClaim(t)
		effs := h.hb(took+s, "bob", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		if !hasEffect[WithdrawClaim](effs) {
			t.Fatalf("ObserveHeartbeat(bob lists w1@2 during alice's retake claim) = %v, want the claim withdrawn", render(effs))
		}
		h.wantState("w1", StateEvicted)
	})
	t.Run("a retake claim being read withdraws", func(t *testing.T) {
		h, took := retakeClaim(t)
		h.m.ClaimPublished(at(took+s), ClaimAck{Workload: "w1", Epoch: 4, Accepted: 3})
		effs := h.hb(took+2*s, "bob", []int{1}, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		h.wantEffects("ObserveHeartbeat(bob lists w1@2 while alice reads claims)", effs, "withdraw w1 epoch=4", "entered w1 promoting -> evicted epoch=3")
	})
	// A retake whose publish fell short waits in its backoff; its next
	// attempt would not look at the silence again, so a lower holder heard
	// then ends it too (nothing to withdraw: the backoff withdrew it), and
	// the retake waits takeover_after after bob's last beat.
	t.Run("a retake in its backoff ends", func(t *testing.T) {
		h, took := retakeClaim(t)
		if effs := h.m.ClaimPublished(at(took+s), ClaimAck{Workload: "w1", Epoch: 4, Accepted: 1}); !hasEffect[WithdrawClaim](effs) {
			t.Fatalf("ClaimPublished(1 of 3) = %v, want a withdrawal and a backoff", render(effs))
		}
		bob := took + 2*s
		effs := h.hb(bob, "bob", all3, []WorkloadEpoch{{ID: "w1", Epoch: 2}})
		h.wantEffects("ObserveHeartbeat(bob lists w1@2 in alice's backoff)", effs, "entered w1 promoting -> evicted epoch=3")
		for d := bob + s; d < bob+ta; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "alice", all3, []WorkloadEpoch{})
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				t.Fatalf("Tick(%v) = %v, want no retake within takeover_after of bob's beat at %v", d, render(effs), bob)
			}
		}
	})
}

// TestReservedOldBeatDoesNotExtendQuorum: a beat a relay serves again long
// after it was made (to a provider that restarted and subscribed anew)
// counts for quorum as seen at most 1 s (created_at's rounding) +
// RelayDelay after its creation (its own beat: one clock; another
// provider's beat, whose created_at is on its own clock, MaxSkew more), not
// at its late arrival: other providers counted silence from
// its first delivery (props TestTakeoverNeverEarly, seed
// 13798835503039173375: a restored holder kept quorum 145 s longer than
// its standby could know, and ran beside the new holder). A timely beat
// counts at its arrival.
func TestReservedOldBeatDoesNotExtendQuorum(t *testing.T) {
	cfg := testConfig()
	h := newHarness(t, "alice", nil)
	created := at(60 * s)
	for r := range 3 {
		h.m.ObserveHeartbeat(at(205*s), Heartbeat{Provider: key("alice"), Relay: fmt.Sprintf("wss://r%d.test", r),
			CreatedAt: created, ReceivedAt: at(205 * s), Listed: true})
	}
	if got, want := h.m.QuorumUntil(key("alice")), created.Add(time.Second+cfg.RelayDelay+cfg.Stale); !got.Equal(want) {
		t.Fatalf("QuorumUntil after an own beat created at 60 s re-served at 205 s = %v, want %v (creation + its rounding + relay_delay + stale)", got, want)
	}
	// Bob's view of alice: her created_at is on her clock, max_skew more.
	hb := newHarness(t, "bob", nil)
	hb.track(0, warmSpec("w1", "alice", "bob"))
	for r := range 3 {
		hb.m.ObserveHeartbeat(at(205*s), Heartbeat{Provider: key("alice"), Relay: fmt.Sprintf("wss://r%d.test", r),
			CreatedAt: created, ReceivedAt: at(205 * s), Listed: true})
	}
	if got, want := hb.m.QuorumUntil(key("alice")), created.Add(time.Second+cfg.MaxSkew+cfg.RelayDelay+cfg.Stale); !got.Equal(want) {
		t.Fatalf("bob's QuorumUntil of alice after her beat created at 60 s re-served at 205 s = %v, want %v (creation + its rounding + max_skew + relay_delay + stale)", got, want)
	}
	h.hb(300*s, "alice", all3, []WorkloadEpoch{})
	if got, want := h.m.QuorumUntil(key("alice")), at(300*s).Add(cfg.Stale); !got.Equal(want) {
		t.Fatalf("QuorumUntil after a timely beat at 300 s = %v, want %v", got, want)
	}
}

// TestReusedClaimHoldsOffTakeover: a standby following alice at epoch 1
// hears carol claim epoch 1 again (relays lost the later epochs; carol,
// a former holder, retakes a number nothing stored contradicts). carol
// will run the workload, so bob's takeover waits takeover_after after
// her claim, as after a heartbeat of hers; a claim made more than Stale
// ago (relays serve claims again on every subscription) changes nothing.
func TestReusedClaimHoldsOffTakeover(t *testing.T) {
	cfg := testConfig()
	run := func(t *testing.T, claimer string, claimAt time.Duration, createdAt time.Time) time.Duration {
		h := newHarness(t, "bob", nil)
		h.track(0, warmSpec("w1", "alice", "bob", "carol"))
		h.hb(0, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		for d := time.Duration(0); d <= 3600*s; d += s {
			if d%(60*s) == 0 {
				h.hb(d, "bob", all3, []WorkloadEpoch{})
			}
			if d == claimAt {
				for r := range 3 {
					h.m.ObserveClaim(at(d), PromotionClaim{Workload: "w1", Claimer: key(claimer), Epoch: 1, Active: true,
						Relay: fmt.Sprintf("wss://r%d.test", r), CreatedAt: createdAt})
				}
			}
			if effs := h.tick(d); hasEffect[PublishClaim](effs) {
				return d
			}
		}
		t.Fatal("bob never took over")
		return 0
	}
	if took, want := run(t, "carol", 300*s, at(299*s)), shownAt(0, 300*s+cfg.TakeoverAfter); took != want {
		t.Errorf("takeover after carol's claim of epoch 1 at 300 s = %v, want %v (her claim + takeover_after)", took, want)
	}
	if took, want := run(t, "carol", 300*s, at(300*s-cfg.Stale-s)), shownAt(0, cfg.TakeoverAfter); took != want {
		t.Errorf("takeover after an old claim served again at 300 s = %v, want %v (alice's silence alone)", took, want)
	}
	// The holder's own claim of its epoch is how it got the epoch, not a
	// reuse: served again (a new subscription), it holds nothing off.
	if took, want := run(t, "alice", 300*s, at(299*s)), shownAt(0, cfg.TakeoverAfter); took != want {
		t.Errorf("takeover after alice's own claim of epoch 1 at 300 s = %v, want %v (her silence alone)", took, want)
	}
	// A claim whose creation time is unknown (zero) may be of any age: it
	// holds nothing off either.
	if took, want := run(t, "carol", 300*s, time.Time{}), shownAt(0, cfg.TakeoverAfter); took != want {
		t.Errorf("takeover after a claim with no created_at served at 300 s = %v, want %v (alice's silence alone)", took, want)
	}
}

// TestFencedWorkloadExpires: a workload fenced by a claim that was then
// withdrawn (no rival left to settle, no holder heard) waits in Fenced with
// nothing but its expiry due, and Tick expires it at that expiry without
// another input (the restored twin of props TestMachineProperties expired
// it only once a restart ticked it: Tick slept on Fenced for ever).
func TestFencedWorkloadExpires(t *testing.T) {
	spec := warmSpec("w1", "alice", "bob")
	spec.ExpiresAt = at(2 * time.Hour)
	h := liveAlice(t, spec, 3600*s, nil)
	h.m.ObserveClaim(at(3601*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true, CreatedAt: at(3601 * s)})
	h.wantState("w1", StateFenced)
	h.m.ObserveClaim(at(3602*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: false, CreatedAt: at(3602 * s)})
	if got := rivals(h); len(got) != 0 {
		t.Fatalf("after the withdrawal: rivals %v, want none", got)
	}
	for d := 3610 * s; d < 2*time.Hour; d += 10 * s {
		h.tick(d)
	}
	h.wantState("w1", StateFenced)
	h.tick(2 * time.Hour)
	h.wantState("w1", StateExpired)
}
