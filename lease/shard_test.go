package lease

import (
	"testing"
	"time"
)

// sharded feeds one beat of from, split into shards events, on relay r;
// skip lists shard indices not delivered.
func (h *harness) sharded(d time.Duration, from string, r int, shards []([]WorkloadEpoch), skip ...int) []Effect {
	var out []Effect
	for i, list := range shards {
		if contains(skip, i) {
			continue
		}
		out = append(out, h.m.ObserveHeartbeat(at(d), Heartbeat{
			Provider: key(from), Relay: relayN(r), CreatedAt: at(d).Truncate(time.Second), ReceivedAt: at(d),
			Listed: true, Workloads: list, Shard: i, Shards: len(shards),
		})...)
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func relayN(r int) string { return testRelays(3)[r-1] }

// TestShardedBeatCountsOnlyWhenComplete: a beat split over several events
// refreshes a provider's relay table (quorum, its own health on the relay)
// only once every shard arrived from that relay; a relay that dropped one
// shard of the holder's own beat does not count for the holder's quorum, so
// the holder fences while standbys may count that relay as silent for the
// workloads of the missing shard.
func TestShardedBeatCountsOnlyWhenComplete(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.track(0, warmSpec("w2", "alice", "bob"))
	beat := [][]WorkloadEpoch{{{ID: "w1", Epoch: 1}}, {{ID: "w2", Epoch: 1}}}
	h.sharded(0, "alice", 1, beat)
	h.sharded(0, "alice", 2, beat, 1) // r2 never delivers shard 1
	h.tick(0)
	if h.m.HasQuorum(at(0), key("alice")) {
		t.Fatalf("HasQuorum(alice) with one complete beat (r1) and one partial (r2), M=2: true, want false")
	}
	h.sharded(0, "alice", 3, beat)
	if !h.m.HasQuorum(at(0), key("alice")) {
		t.Fatalf("HasQuorum(alice) with complete beats on r1 and r3: false, want true")
	}
	h.wantState("w1", StateProvisioning)
	h.tick(s)
	h.wantState("w1", StateLive)
}

// TestShardClaimsPerWorkload: a standby refreshes the holder's claim of a
// workload on a relay only from the shard that lists it; a re-served shard
// of an old beat never extends the claim.
func TestShardClaimsPerWorkload(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.track(0, warmSpec("w2", "alice", "bob"))
	beat := [][]WorkloadEpoch{{{ID: "w1", Epoch: 1}}, {{ID: "w2", Epoch: 1}}}
	for _, r := range all3 {
		h.sharded(10*s, "alice", r, beat, 1) // shard 1 (w2) lost everywhere
	}
	w1, _ := h.m.Workload("w1")
	w2, _ := h.m.Workload("w2")
	if w1.ClaimAt[0].IsZero() || !w2.ClaimAt[0].IsZero() {
		t.Fatalf("ClaimAt(w1), ClaimAt(w2) on r1 = %v, %v, want w1 refreshed and w2 not", w1.ClaimAt[0], w2.ClaimAt[0])
	}
	// shard 1 of the same beat re-served two minutes later counts from the
	// beat's first arrival.
	h.m.ObserveHeartbeat(at(130*s), Heartbeat{Provider: key("alice"), Relay: relayN(1), CreatedAt: at(10 * s), ReceivedAt: at(130 * s),
		Listed: true, Workloads: []WorkloadEpoch{{ID: "w2", Epoch: 1}}, Shard: 1, Shards: 2})
	w2, _ = h.m.Workload("w2")
	if !w2.ClaimAt[0].Equal(at(10 * s)) {
		t.Fatalf("ClaimAt(w2) on r1 after a late shard = %v, want the beat's first arrival %v", w2.ClaimAt[0], at(10*s))
	}
}
