package lease

import (
	"testing"
	"time"
)

// Tests of the relay watch (watch.go): what a relay's live stream shows.

// TestRelayWatchLifecycle: a relay is watched from its RelaySynced until a
// RelayGap; a RelaySynced while watched (a change of subscriptions that
// overlapped) keeps the stream's start; own beats extend the proof only
// while watched, and only up to created_at - RelayDelay.
func TestRelayWatchLifecycle(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	rd := h.m.Config().RelayDelay
	r1 := "wss://r1.test"
	watch := func() RelayWatch { return h.m.Watching()[0] }
	if got := watch(); !got.Since.Equal(at(0)) || !got.ShownUntil.IsZero() {
		t.Fatalf("Watching()[r1] after sync at 0 = %+v, want since 0, nothing shown", got)
	}
	h.hb(60*s, "bob", []int{1}, []WorkloadEpoch{})
	if got, want := watch().ShownUntil, at(60*s-rd); !got.Equal(want) {
		t.Fatalf("shown until after an own beat created at 60 s = %v, want %v", got, want)
	}
	h.m.RelaySynced(at(70*s), r1)
	if got := watch(); !got.Since.Equal(at(0)) {
		t.Fatalf("a RelaySynced without a gap moved the stream's start to %v, want 0", got.Since)
	}
	h.m.RelayGap(at(80*s), r1)
	if got := watch(); !got.Since.IsZero() || !got.ShownUntil.IsZero() {
		t.Fatalf("Watching()[r1] after a gap = %+v, want nothing", got)
	}
	h.hb(120*s, "bob", []int{1}, []WorkloadEpoch{}) // served from storage before the EOSE
	if got := watch(); !got.ShownUntil.IsZero() {
		t.Fatalf("an own beat fed between a gap and the sync shows %v, want nothing", got.ShownUntil)
	}
	h.m.RelaySynced(at(125*s), r1)
	h.hb(180*s, "bob", []int{1}, []WorkloadEpoch{})
	if got := watch(); !got.Since.Equal(at(125*s)) || !got.ShownUntil.Equal(at(180*s-rd)) {
		t.Fatalf("Watching()[r1] after a new stream from 125 s and an own beat at 180 s = %+v", got)
	}
}

// TestUnorderedOwnBeatShowsSilenceOnlyOnceShown: an own beat fed ahead of
// the events before it (the agent verifies others' events concurrently)
// counts for quorum at once but shows silence only after RelayShown.
func TestUnorderedOwnBeatShowsSilenceOnlyOnceShown(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	ta := h.m.Config().TakeoverAfter
	beat := func(d time.Duration) {
		for r := 1; r <= 3; r++ {
			h.m.ObserveHeartbeat(at(d), Heartbeat{Provider: key("bob"), Relay: relayURL(r), CreatedAt: at(d),
				ReceivedAt: at(d), Listed: true, Unordered: true})
		}
	}
	var last time.Duration
	for d := time.Duration(0); d <= 2*ta; d += 60 * s {
		beat(d)
		last = d
		if effs := h.tick(d); hasEffect[PublishClaim](effs) {
			t.Fatalf("Tick(%v) = %v, want no claim: no own beat was shown in order", d, render(effs))
		}
	}
	if !h.m.HasQuorum(at(last), key("bob")) {
		t.Fatalf("unordered own beats did not count for bob's quorum")
	}
	for r := 1; r <= 3; r++ {
		h.m.RelayShown(at(last), relayURL(r), at(last), at(last))
	}
	h.wantEffects("Tick after RelayShown", h.tick(last+s), "entered w1 standby -> promoting epoch=1", "claim w1 epoch=2")
}

// TestRestoredMachineWatchesNothing: the watch is volatile: a restored
// machine watches no relay until each one's RelaySynced, whatever the
// snapshot's machine watched.
func TestRestoredMachineWatchesNothing(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.hb(60*s, "bob", all3, []WorkloadEpoch{})
	restoreJSON(t, h, 61*s)
	m := h.m
	for _, w := range m.Watching() {
		if !w.Since.IsZero() || !w.ShownUntil.IsZero() {
			t.Fatalf("restored Watching() = %+v, want nothing watched", m.Watching())
		}
	}
	m.RelaySynced(at(62*s), relayURL(2))
	if got := m.Watching()[1]; !got.Since.Equal(at(62 * s)) {
		t.Fatalf("restored Watching()[r2] after its sync = %+v, want since 62 s", got)
	}
}

// TestSilenceShownNeedsOneCommonStretch: silenceShown wants one instant
// that ends takeover_after of silence on N-M+1 relays at once, and waits
// the proof lag after it.
func TestSilenceShownNeedsOneCommonStretch(t *testing.T) {
	h := newHarness(t, "bob", nil)
	wait := 100 * s
	lag := h.m.proofLag()
	set := func(r int, from, proven time.Duration) {
		h.m.watch[r] = relayWatch{from: at(from), proven: at(proven)}
	}
	none := func(int) time.Time { return time.Time{} }
	set(0, 0, 150*s)
	set(1, 90*s, 400*s)
	h.m.watch[2] = relayWatch{}
	// r1 shows [0, 150], r2 [90, 400]: a common end needs >= 190 (r2's
	// start + wait) and <= 150 (r1's end): none.
	if shown, _ := h.m.silenceShown(at(1000*s), wait, none); shown {
		t.Fatalf("silenceShown over [0,150] and [90,400] = true, want false")
	}
	set(0, 0, 200*s)
	// Now 190 is common: due at 190 + the proof lag, not before.
	if shown, due := h.m.silenceShown(at(190*s+lag-time.Millisecond), wait, none); shown || !due.Equal(at(190*s+lag)) {
		t.Fatalf("silenceShown just before the lag = %v due %v, want false due %v", shown, due, at(190*s+lag))
	}
	if shown, _ := h.m.silenceShown(at(190*s+lag), wait, none); !shown {
		t.Fatalf("silenceShown at 190 s + the proof lag = false, want true")
	}
	// since(r) moves the start: silence of the holder since 150 s on r2
	// needs an end >= 250, beyond r1's proof.
	if shown, _ := h.m.silenceShown(at(1000*s), wait, func(r int) time.Time {
		if r == 1 {
			return at(150 * s)
		}
		return time.Time{}
	}); shown {
		t.Fatalf("silenceShown with the holder heard on r2 at 150 s = true, want false")
	}
}

func relayURL(r int) string { return testRelays(3)[r-1] }

// TestEvictedFencedByAClaimAlreadyARival: an evicted former holder that
// recorded a claim of the next epoch as a rival while it tried to retake,
// and went back to evicted (its clock turned suspect in the backoff), is
// fenced when it hears that claim again, and says so (EnteredState): the
// claim is fenced on, not dropped as a rival already known (props
// TestMachineProperties, seed 13132000583938696460, after 1,847 checks).
func TestEvictedFencedByAClaimAlreadyARival(t *testing.T) {
	h, ev := evictedAlice(t)
	back := ev + 60*s
	h.reconnect(back)
	var took time.Duration
	for d := back; d <= back+3*h.m.Config().TakeoverAfter && took == 0; d += s {
		if (d-back)%(60*s) == 0 {
			h.hb(d, "alice", all3, []WorkloadEpoch{})
		}
		if hasEffect[PublishClaim](h.tick(d)) {
			took = d
		}
	}
	if took == 0 {
		t.Fatal("alice never retook")
	}
	claim := PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true, Relay: relayURL(1), CreatedAt: at(took)}
	h.m.ObserveClaim(at(took+s), claim)
	h.wantEffects("ClaimPublished(too few)", h.m.ClaimPublished(at(took+2*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 1}), "withdraw w1 epoch=2")
	h.m.SetClockSuspect(at(took+3*s), true, "skew")
	h.wantEffects("Tick(backoff over, clock suspect)", h.tick(took+2*s+h.m.Config().ClaimBackoff(1, h.m.byID["w1"].rank)),
		"entered w1 promoting -> evicted epoch=1")
	h.wantEffects("ObserveClaim(the same claim again)", h.m.ObserveClaim(at(took+10*time.Minute), claim),
		"entered w1 evicted -> fenced epoch=1")
}
