package props_test

import (
	"testing"
	"time"

	"provideragent/props"

	"provideragent/props/sim"
)

// anchorProtocol runs the anchor's (Paygress v1) rule on every provider.
func anchorProtocol() protocol {
	return protocol{
		name: "anchor rule (standby promotes after 180 s of silence; primary evicts after t1+t2)",
		cfg:  sim.DefaultConfig(),
		nodes: func(sc scenario) []sim.Node {
			cfg := sim.DefaultAnchorConfig()
			cfg.M, cfg.N = sc.M, sc.N
			nodes := make([]sim.Node, sc.K)
			for i := range nodes {
				nodes[i] = sim.NewAnchorNode(cfg, workloadID, sim.ProviderID(i))
			}
			return nodes
		},
	}
}

// splitBrainSearch is the fault space both rule sets face in
// TestAnchorRuleSplitBrain: partitions, relay crashes, loss, duplicates,
// reordering and replays, with clocks, delays and pauses within bounds.
func splitBrainSearch() faultSpace {
	return faultSpace{
		MinK: 2, MaxK: 3, MinN: 3, MaxN: 3, FixedM: 2,
		MaxAdvance:   10 * time.Minute,
		Warmup:       10 * time.Minute,
		Partitions:   true,
		RelayCrashes: true,
		LinkFaults:   true,
		Replays:      true,
		OnlyRelay:    -1,
	}
}

func TestAnchorRuleSplitBrain(t *testing.T) {
	found, out := expectCounterexample(t, "anchor", runSafety(anchorProtocol(), splitBrainSearch(), nil))
	if !found {
		t.Fatalf("rapid.Check(anchor rule) found no two-writer schedule, want one:\n%s", out)
	}
	t.Logf("rapid's shrunk two-writer schedule for the anchor's rule:\n%s", out)

	// Our rules pass the same search.
	t.Run("ours", func(t *testing.T) {
		var st stats
		props.Check(t, runSafety(leaseProtocol(), splitBrainSearch(), &st))
		t.Logf("%v", &st)
	})
}
