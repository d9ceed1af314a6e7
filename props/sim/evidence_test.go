package sim

import (
	"testing"
	"time"
)

// A validly signed claim a relay serves for a key outside the world (the
// fault InjectForged makes) is no evidence that any provider held its
// epoch: the nodes ignore it, so the checker must too. It used to count,
// which reported a regression from "epoch 2^40" (TestProcessExits seed
// 3124830530 after 6,518 checks).
func TestInjectedClaimIsNoEvidence(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Providers, cfg.Relays, cfg.Seed = 3, 3, 11
	cfg.TickInterval = time.Second
	lc := LeaseConfig(1, 3)
	spec := LeaseSpec(lc, "w", 3)
	nodes := make([]Node, 3)
	for i := range nodes {
		nodes[i] = NewLeaseNode(lc, spec, ProviderID(i), 3)
	}
	s, err := New(cfg, nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Boot()
	s.RunFor(5 * time.Minute)
	for r := range 3 {
		s.InjectForged(RelayID(r), ForgedEvent{Workload: "w", Author: 11, At: 1767225600})
	}
	if n := s.storedEpochEvidence("w", 1); n != 0 {
		t.Fatalf("storedEpochEvidence(w, 1) = %d relays after injected claims of epoch 2^40, want 0", n)
	}
}
