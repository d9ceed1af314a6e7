package props_test

import (
	"fmt"
	"testing"
	"time"

	"provideragent/lease"
	"provideragent/props/sim"
)

// TestRevocationWaitsForASlowStop holds the fence gate (rule 7: a
// revocation leaves only once its workload's process is fenced here) to
// account. The gate is driver.Shell's, the one the agent's outbox asks too.
// With stops that take at most relay_delay (the default stop_grace), the
// successor's claim step (a claim, then a read relay_delay later) outlasts
// any stop, so a revocation sent at once would do no harm; an operator may
// configure a longer stop_grace, up to what the margin leaves once pauses
// are accounted for. Here stops take up to a minute and nothing pauses (inside
// the assumptions, as the test checks first): P0 (holder, epoch 1) keeps
// only R2, loses quorum, fences itself after T1+T2 and revokes naming P1,
// which reads the revocation on R2 and claims epoch 2 at once. Without the
// gate, P1 starts about 12 s after the eviction, beside P0's copy whenever
// its stop takes longer than that (most seeds).
func TestRevocationWaitsForASlowStop(t *testing.T) {
	slow := assumed
	slow.MaxPause = 0
	slow.StopGrace = time.Minute
	if err := slow.Validate(lease.DefaultConfig()); err != nil {
		t.Fatalf("a one-minute stop_grace without pauses: %v, want inside the assumptions", err)
	}
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			proto := leaseProtocol()
			cfg := proto.cfg
			cfg.Providers, cfg.Relays, cfg.Seed = 3, 3, seed
			cfg.StopTime = slow.StopGrace
			s, err := sim.New(cfg, proto.nodes(scenario{K: 3, M: 2, N: 3}), nil)
			if err != nil {
				t.Fatal(err)
			}
			s.AddChecker(sim.SingleWriter(workloadID, 2))
			s.KeepClaims(workloadID, slow.ClaimsKeptLive)
			s.Boot()
			s.RunUntil(100 * time.Second)
			s.Partition(0, 0) // P0 keeps R2 only: it loses quorum, and its
			s.Partition(0, 1) // revocation reaches P1 there
			s.RunUntil(900 * time.Second)
			wantOneWriter(t, s)
			if e, ok := s.Node(1).Live(workloadID); !ok || e != 2 {
				t.Fatalf("P1 Live = %d, %v after P0's revocation, want epoch 2 (taken over by revocation)\n%s", e, ok, sim.FormatTimeline(s.Timeline()))
			}
		})
	}
}
