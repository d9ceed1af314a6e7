package props_test

import (
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
	acrossSeeds(t, 20, 3, 2, 3, func(t *testing.T, s *sim.Sim) {
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

// TestStandbyHearsAReusedEpochClaim is the fixed schedule of the rule
// found by the 20,000-check run of TestLateDeliveries (lease
// heardReusedClaim): 3 providers, M=2 of N=3 relays. P0, Live at epoch 1,
// is cut off from every relay; a standby (H) takes over epoch 2 and the
// other (S) follows it as standby@2. H then goes down for good, S is cut
// off, and every relay loses its storage: nothing stored says epoch 2 was
// ever used. P0 comes back and S 60 s later; both count silence from then,
// so P0, evicted at epoch 1, retakes epoch 2 shortly before S's takeover is
// due (a reused epoch: its claim read finds nothing) and is cut off again
// once it holds. S, which knew epoch 2 as H's, used to ignore P0's claim
// of an epoch at or below its own and took over epoch 3 beside it (two
// writers in 10 of these 10 seeds on the code before the rule). Now a
// claim of the known epoch by another provider holds S off as a holder's
// heartbeat does.
func TestStandbyHearsAReusedEpochClaim(t *testing.T) {
	acrossSeeds(t, 10, 3, 2, 3, func(t *testing.T, s *sim.Sim) {
		s.RunUntil(100 * time.Second)
		isolate(s, 0, 3)
		var h, sb sim.ProviderID
		s.RunWhile(s.Now()+3000*time.Second, func() bool {
			for _, p := range []sim.ProviderID{1, 2} {
				if e, ok := holding(s, p); ok && e == 2 {
					h, sb = p, 3-p
					return false
				}
			}
			return true
		})
		if e, ok := holding(s, h); !ok || e != 2 {
			t.Fatalf("nobody took over epoch 2: %s", s.Describe())
		}
		s.RunFor(2 * time.Minute)
		s.CrashProvider(h, true)
		isolate(s, sb, 3)
		for r := sim.RelayID(0); r < 3; r++ {
			s.CrashRelay(r, true)
			s.After(5*time.Second, func() { s.RestartRelay(r) })
		}
		s.RunFor(10 * time.Second)
		reconnect(s, 0, 3)
		s.RunFor(60 * time.Second)
		reconnect(s, sb, 3)
		s.RunWhile(s.Now()+3000*time.Second, func() bool { _, ok := holding(s, 0); return !ok })
		e0, _ := holding(s, 0)
		isolate(s, 0, 3)
		s.RunFor(30 * time.Minute)
		if e0 != 2 {
			t.Fatalf("P0 retook epoch %d, want the reused epoch 2: %s", e0, s.Describe())
		}
		wantOneWriter(t, s)
	})
}
