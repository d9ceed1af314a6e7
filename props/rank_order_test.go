package props_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"provideragent/props/sim"
)

// Standbys of one workload claim in rank order: the second-ranked one
// waits TakeoverAfter plus lease.Config.RankStagger, so the first-ranked
// one's claim reaches it before it falls due, even when every delay is at
// its bound the wrong way. A stagger of ClaimRetryBase alone (15 s by
// default) did not cover that: the two standbys' views of the holder's last
// beat differ by up to RelayDelay, and the first one's claim takes up to
// RelayDelay more to reach the second (10 s each by default), so both
// claimed, saw each other, withdrew and tried again (what the fleet
// benchmark showed as claims withdrawn after a rack died).

// TestStandbysClaimInRankOrder: 3 providers, M=2 of N=3, perfect clocks,
// no network jitter (LegDelay 0), and two delays at RelayDelay, the
// assumed bound: P0's events reach P1 (rank 0) RelayDelay late on every
// relay, so P1 counts P0's silence from RelayDelay later than P2 (rank 1)
// does, and P1's events reach P2 RelayDelay late, so P2 learns of P1's
// claim RelayDelay after it is published. P0 dies for good at 100 s. Only
// P1 may publish a claim for epoch 2, and it must win it at the first try.
func TestStandbysClaimInRankOrder(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { claimInRankOrder(t, seed) })
	}
}

func claimInRankOrder(t *testing.T, seed uint64) {
	proto := leaseProtocol()
	cfg := proto.cfg
	cfg.Providers, cfg.Relays, cfg.Seed, cfg.LegDelay = 3, 3, seed, 0
	s, err := sim.New(cfg, proto.nodes(scenario{K: 3, M: 2, N: 3}), nil)
	if err != nil {
		t.Fatalf("sim.New() = %v, want nil", err)
	}
	s.AddChecker(sim.SingleWriter(workloadID, 2))
	s.KeepClaims(workloadID, assumed.ClaimsKeptLive)
	s.Boot()
	for r := range sim.RelayID(3) {
		s.SetPathDelay(0, r, 1, assumed.MaxDelay)
		s.SetPathDelay(1, r, 2, assumed.MaxDelay)
	}
	s.RunUntil(100 * time.Second)
	if e, ok := s.Node(0).Live(workloadID); !ok || e != 1 {
		t.Fatalf("P0 Live = %d, %v at 100 s, want epoch 1", e, ok)
	}
	s.Kill(0)
	s.RunUntil(40 * time.Minute)
	if v := s.Violation(); v != nil {
		t.Fatalf("%s", v.Msg)
	}
	if e, ok := s.Node(1).Live(workloadID); !ok || e != 2 {
		t.Fatalf("P1 Live = %d, %v at the end, want epoch 2 (rank 0 takes over)\n%s", e, ok, sim.FormatTimeline(s.Timeline()))
	}
	var claims []string
	for _, e := range s.Timeline() {
		if strings.HasPrefix(e.What, "publishes claim for epoch") || strings.HasPrefix(e.What, "withdraws claim") {
			claims = append(claims, e.Who+" "+e.What)
		}
	}
	if len(claims) != 1 || claims[0] != "P1 publishes claim for epoch 2" {
		t.Fatalf("claims published and withdrawn = %q, want only P1's claim for epoch 2\n%s", claims, sim.FormatTimeline(s.Timeline()))
	}
}
