package props_test

import (
	"fmt"
	"testing"
	"time"

	"provideragent/props/sim"
)

// holding is the epoch p holds the workload at (a Holding state, not the
// claim step).
func holding(s *sim.Sim, p sim.ProviderID) (uint64, bool) {
	e, claiming, ok := s.Node(p).(sim.Holder).Holding(workloadID)
	return e, ok && !claiming
}

// TestRetakeBesideAReusedLowerEpoch is the fixed schedule of the rule
// found by the 20,000-check run of TestLateDeliveries (lease
// heardLowerHolder): P1 is cut off from the start; P2 takes over epoch 2
// from P0 (then down for good), loses quorum, retakes epoch 3 and, Live
// for 20 min, loses quorum again; every relay then loses its storage, so
// P1, back, takes over reusing epoch 2. P2 is healed while P1 is Live and
// P1 is cut off from every relay 300 s later. P2, evicted at epoch 3, used
// to ignore P1's beats at the lower epoch and retake epoch 4 inside P1's
// self-fence (two writers in 20 of 20 seeds); it now waits takeover_after
// after P1's last beat.
func TestRetakeBesideAReusedLowerEpoch(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			s := scriptedWorld(t, 3, 2, 3, seed)
			s.RunUntil(100 * time.Second)
			isolate(s, 1, 3)
			s.Partition(0, 0)
			s.Partition(0, 1)
			s.RunWhile(s.Now()+3000*time.Second, func() bool { e, ok := holding(s, 2); return !ok || e != 2 })
			s.CrashProvider(0, true)
			s.Partition(2, 0)
			s.Partition(2, 1)
			s.RunWhile(s.Now()+3000*time.Second, func() bool { _, ok := holding(s, 2); return ok })
			reconnect(s, 2, 3)
			s.RunWhile(s.Now()+3000*time.Second, func() bool { e, ok := holding(s, 2); return !ok || e != 3 })
			s.RunFor(20 * time.Minute)
			s.Partition(2, 0)
			s.Partition(2, 1)
			s.RunWhile(s.Now()+3000*time.Second, func() bool { _, ok := holding(s, 2); return ok })
			s.RunFor(30 * time.Second)
			for r := sim.RelayID(0); r < 3; r++ {
				s.CrashRelay(r, true)
				s.After(5*time.Second, func() { s.RestartRelay(r) })
			}
			s.RunFor(10 * time.Second)
			reconnect(s, 1, 3)
			s.RunWhile(s.Now()+3000*time.Second, func() bool { _, ok := holding(s, 1); return !ok })
			e1, _ := holding(s, 1)
			s.RunFor(60 * time.Second)
			reconnect(s, 2, 3)
			s.RunFor(300 * time.Second)
			isolate(s, 1, 3)
			s.RunFor(1500 * time.Second)
			if e1 != 2 {
				t.Fatalf("P1 took over at epoch %d, want the reused epoch 2: %s", e1, s.Describe())
			}
			wantOneWriter(t, s)
		})
	}
}
