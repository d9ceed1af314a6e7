package props_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"provideragent/lease"
	"provideragent/props"
	"provideragent/props/sim"
)

// TestLiveness: the primary dies for good; one standby (rapid picks which)
// and max(M, N-M+1) relays stay healthy (up, links intact, delays within
// RelayDelay); every other relay suffers any fault (crash, storage loss,
// partitions, loss, duplicates, reordering, replays); every other standby is
// either healthy or dies too. Some standby must be Live within
// props.LivenessBound of the primary's death.
func TestLiveness(t *testing.T) {
	var checks, worstK int
	var worst time.Duration
	props.Check(t, func(rt *rapid.T) {
		fs := faultSpace{MinK: 2, MaxK: 4, MinN: 3, MaxN: 5,
			MaxOffset: assumed.MaxClockOffset, MaxDriftPPM: assumed.MaxDriftPPM}
		n := rapid.IntRange(3, 5).Draw(rt, "n")
		fs.MinN, fs.MaxN = n, n
		fs.FixedM = rapid.IntRange((n+2)/2, n).Draw(rt, "m") // max(M, N-M+1) == M
		w := newWorld(rt, leaseProtocol(), fs)
		sc, s := w.sc, w.s
		healthyStandby := sim.ProviderID(rapid.IntRange(1, sc.K-1).Draw(rt, "healthyStandby"))
		perm := rapid.Permutation(relayIDs(sc.N)).Draw(rt, "relayOrder")
		healthy := map[sim.RelayID]bool{}
		for _, r := range perm[:sc.M] {
			healthy[r] = true
		}
		rt.Logf("healthy standby P%d, healthy relays %v", healthyStandby, perm[:sc.M])

		warmup := drawDuration(rt, "warmup", 2*time.Minute, 30*time.Minute)
		s.RunFor(warmup)
		death := s.Now()
		rt.Logf("t=%v P0 dies for good", death)
		s.Kill(0)
		for p := 1; p < sc.K; p++ {
			if sim.ProviderID(p) != healthyStandby && rapid.Bool().Draw(rt, fmt.Sprintf("kill%d", p)) {
				rt.Logf("t=%v P%d dies too", s.Now(), p)
				s.Kill(sim.ProviderID(p))
			}
		}
		for _, r := range perm[sc.M:] {
			faultRelay(rt, s, r, sc.K)
		}
		bound := props.LivenessBound(lease.DefaultConfig(), sc.K, assumed, leaseProtocol().cfg.QueryTimeout)
		liveAt := s.RunWhile(death+bound, func() bool { return !anyStandbyLive(s, sc.K) })
		if v := s.Violation(); v != nil {
			rt.Fatalf("%s at t=%v\ntimeline:\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
		}
		if liveAt < 0 {
			rt.Fatalf("no standby Live %v after the primary died (bound %v): %s\ntimeline:\n%s",
				s.Now()-death, bound, s.Describe(), sim.FormatTimeline(s.Timeline()))
		}
		checks++
		if took := liveAt - death; took > worst {
			worst, worstK = took, sc.K
		}
	})
	t.Logf("%d checks: slowest failover %v (K=%d, bound %v)", checks, worst.Round(time.Millisecond), worstK,
		props.LivenessBound(lease.DefaultConfig(), worstK, assumed, leaseProtocol().cfg.QueryTimeout))
}

func relayIDs(n int) []sim.RelayID {
	out := make([]sim.RelayID, n)
	for i := range out {
		out[i] = sim.RelayID(i)
	}
	return out
}

func anyStandbyLive(s *sim.Sim, k int) bool {
	for p := 1; p < k; p++ {
		if _, ok := s.Node(sim.ProviderID(p)).Live(workloadID); ok {
			return true
		}
	}
	return false
}

// faultRelay gives relay r one fault drawn by rapid, now or later.
func faultRelay(t *rapid.T, s *sim.Sim, r sim.RelayID, k int) {
	at := drawDuration(t, "faultAt", 0, 10*time.Minute)
	switch kind := rapid.IntRange(0, 4).Draw(t, "relayFault"); kind {
	case 0:
		wipe := rapid.Bool().Draw(t, "wipe")
		down := drawDuration(t, "down", 0, time.Hour)
		t.Logf("R%d crashes at +%v (wipe %v) for %v", r, at, wipe, down)
		s.After(at, func() {
			s.CrashRelay(r, wipe)
			s.After(down, func() { s.RestartRelay(r) })
		})
	case 1:
		t.Logf("R%d is cut from every provider at +%v", r, at)
		s.After(at, func() {
			for p := 0; p < k; p++ {
				s.Partition(sim.ProviderID(p), r)
			}
		})
	case 2:
		f := sim.LinkFaults{LossPct: rapid.IntRange(0, 100).Draw(t, "loss"), DupPct: rapid.IntRange(0, 100).Draw(t, "dup"),
			Reorder: rapid.Bool().Draw(t, "reorder"), Extra: drawDuration(t, "extra", 0, time.Hour)}
		t.Logf("R%d's links degrade at +%v: %+v", r, at, f)
		s.After(at, func() {
			for p := 0; p < k; p++ {
				s.SetLinkFaults(sim.ProviderID(p), r, f)
			}
		})
	case 3:
		t.Logf("R%d replays its stored heartbeats every minute from +%v", r, at)
		var replay func()
		replay = func() {
			s.ReplayHeartbeats(r)
			s.After(time.Minute, replay)
		}
		s.After(at, replay)
	default:
		t.Logf("R%d stays healthy", r)
	}
}

// TestResumedPrimaryRetakes (issue 12 item 4): the primary is cut off from
// every relay long enough to evict itself (stop, revocation), and meanwhile
// every standby dies for good, so nobody claims the next epoch. Once the
// primary reaches max(M, N-M+1) healthy relays again (the others suffer any
// fault), it must take the workload back through the claim step and be Live
// at a higher epoch within TakeoverAfter plus the claim step's propagation
// (props.LivenessBound for one standby) of the heal, instead of leaving it
// evicted with nobody running it. Safety is checked throughout.
func TestResumedPrimaryRetakes(t *testing.T) {
	var checks int
	var worst time.Duration
	props.Check(t, func(rt *rapid.T) {
		fs := faultSpace{MinK: 2, MaxK: 4, MinN: 3, MaxN: 5,
			MaxOffset: assumed.MaxClockOffset, MaxDriftPPM: assumed.MaxDriftPPM}
		n := rapid.IntRange(3, 5).Draw(rt, "n")
		fs.MinN, fs.MaxN = n, n
		fs.FixedM = rapid.IntRange((n+2)/2, n).Draw(rt, "m") // max(M, N-M+1) == M
		w := newWorld(rt, leaseProtocol(), fs)
		sc, s := w.sc, w.s
		perm := rapid.Permutation(relayIDs(sc.N)).Draw(rt, "relayOrder")
		s.RunFor(drawDuration(rt, "warmup", 2*time.Minute, 30*time.Minute))
		rt.Logf("t=%v P0 cut off from every relay", s.Now())
		isolate(s, 0, sc.N)
		for p := 1; p < sc.K; p++ {
			at := drawDuration(rt, fmt.Sprintf("death%d", p), 0, 5*time.Minute)
			rt.Logf("P%d dies for good at +%v", p, at)
			s.After(at, func() { s.Kill(sim.ProviderID(p)) })
		}
		s.RunFor(drawDuration(rt, "cut", 20*time.Minute, 2*time.Hour))
		if st, ok := s.Node(0).(*sim.LeaseNode).Machine().State(workloadID); !ok || st != lease.StateEvicted {
			rt.Fatalf("P0 is %v after the cut, want evicted\ntimeline:\n%s", st, sim.FormatTimeline(s.Timeline()))
		}
		healed := s.Now()
		rt.Logf("t=%v P0 reaches relays %v again", healed, perm[:sc.M])
		for _, r := range perm[:sc.M] {
			s.Heal(0, r)
		}
		for _, r := range perm[sc.M:] {
			if rapid.Bool().Draw(rt, fmt.Sprintf("heal%d", r)) {
				s.Heal(0, r)
			}
			faultRelay(rt, s, r, sc.K)
		}
		cfg := lease.DefaultConfig()
		bound := props.LivenessBound(cfg, 2, assumed, leaseProtocol().cfg.QueryTimeout) + cfg.HeartbeatInterval
		liveAt := s.RunWhile(healed+bound, func() bool { e, ok := s.Node(0).Live(workloadID); return !ok || e < 2 })
		if v := s.Violation(); v != nil {
			rt.Fatalf("%s at t=%v\ntimeline:\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
		}
		if liveAt < 0 {
			rt.Fatalf("P0 not Live at a higher epoch %v after it reached the relays again (bound %v): %s\ntimeline:\n%s",
				s.Now()-healed, bound, s.Describe(), sim.FormatTimeline(s.Timeline()))
		}
		checks++
		worst = max(worst, liveAt-healed)
	})
	t.Logf("%d checks: slowest retake %v after the heal", checks, worst.Round(time.Millisecond))
}
