package props_test

import (
	"testing"
	"time"

	"provideragent/props/sim"
)

// TestRestartedHolderOwnOldBeats is the fixed schedule of the quorum rule
// found by the 20,000-check run of TestTakeoverNeverEarly (lease: a
// re-served old heartbeat counts for quorum as seen no later than its
// created_at + 1 s + max_skew + relay_delay): 2 providers, M=4 of N=4
// relays. P0 crashes between the stops and the commit of the step that
// makes it Live, and restarts 160 s later; subscribing again, it gets its
// own heartbeats from before the crash, now over 2.5 min old. It is cut off
// from R1 as soon as it is Live, and from every relay 121 s later. It used
// to count those old beats as seen on arrival, so its quorum (which needs
// R1) lasted about 160 s longer than P1 could know, and P0 was still
// stopping when P1 took over epoch 2 (two writers in 8 of these 10 seeds on
// the code before the rule). Now P0 has stopped before P1 starts.
func TestRestartedHolderOwnOldBeats(t *testing.T) {
	acrossSeeds(t, 10, 2, 4, 4, func(t *testing.T, s *sim.Sim) {
		s.Node(0).(interface{ ArmCrashBeforeCommit(time.Duration) }).ArmCrashBeforeCommit(160 * time.Second)
		s.RunUntil(150 * time.Second)
		s.RunWhile(s.Now()+3000*time.Second, func() bool { _, ok := s.Node(0).Live(workloadID); return !ok })
		if _, ok := s.Node(0).Live(workloadID); !ok {
			t.Fatalf("P0 is not Live again after its restart: %s\n%s", s.Describe(), sim.FormatTimeline(s.Timeline()))
		}
		s.Partition(0, 1)
		s.RunFor(121 * time.Second)
		isolate(s, 0, 4)
		s.RunFor(30 * time.Minute)
		if e, ok := holding(s, 1); !ok || e != 2 {
			t.Fatalf("P1 holds at epoch %d (%v), want it to have taken over epoch 2: %s", e, ok, s.Describe())
		}
		wantOneWriter(t, s)
	})
}
