package props_test

import (
	"strings"
	"testing"
	"time"

	"provideragent/props/sim"
)

// TestFencedByAFailedClaimerTakesOver is the fixed schedule of the
// liveness defect the 20,000-check run of TestLivenessAfterHeal found
// (lease: a fenced provider follows a settled claim): 2 providers, M=4 of
// N=4 relays. P0, Live, crashes; P1 takes over epoch 2, and its process
// keeps exiting until the restart policy runs out (terminal for P1; in the
// run's schedule a lossy link failed its provisioning instead). P0
// restarts, evicts itself at epoch 1, hears P1's claim and is fenced. A
// fenced provider used to rejoin only on the claimer's heartbeat, which a
// failed P1 no longer sends: nobody ran the workload again (P0 fenced@1,
// P1 failed@2 in 10 of 10 seeds on the code before the fix). It now
// follows P1 once the claim has settled and takes over epoch 3 after
// takeover_after of P1's silence.
func TestFencedByAFailedClaimerTakesOver(t *testing.T) {
	acrossSeeds(t, 10, 2, 4, 4, func(t *testing.T, s *sim.Sim) {
		s.RunUntil(186 * time.Second)
		s.CrashProvider(0, false)
		s.RunWhile(s.Now()+3000*time.Second, func() bool { e, ok := holding(s, 1); return !ok || e != 2 })
		for range 120 { // its process keeps exiting: the restart policy runs out
			s.ExitWorkload(1, workloadID)
			s.RunFor(5 * time.Second)
		}
		if d := s.Describe(); !strings.Contains(d, "P1:failed@2") {
			t.Fatalf("P1 did not fail its provisioning at epoch 2: %s\n%s", d, sim.FormatTimeline(s.Timeline()))
		}
		s.RestartProvider(0)
		s.RunFor(30 * time.Minute)
		e, ok := holding(s, 0)
		if !ok || e != 3 {
			t.Fatalf("P0 holds at epoch %d (%v) 30 min after the heal, want epoch 3: %s", e, ok, s.Describe())
		}
		wantOneWriter(t, s)
	})
}
