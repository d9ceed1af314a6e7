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

// TestResumedPrimaryRetakes: the primary is cut off from
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

// healBound is how soon after every fault heals exactly one provider runs
// the workload (TestLivenessAfterHeal): the takeover's wait counted from the
// heal (a standby's own stretch of heartbeats restarts then), the rank
// stagger and the claim step's propagation (props.LivenessBound), plus one
// claim backoff at its cap (a claim step that failed during the faults may
// be backing off when they heal) and the provisioning of the new holder.
func healBound(k int) time.Duration {
	cfg := lease.DefaultConfig()
	return props.LivenessBound(cfg, k, assumed, leaseProtocol().cfg.QueryTimeout) + cfg.ClaimRetryMax + cfg.ProvisionTimeout
}

// TestLivenessAfterHeal: any schedule of partitions,
// relay crashes with or without their storage, relays that freeze (take
// everything and answer nothing) for a while, lossy links, provider crashes
// and pauses, for up to an hour; then every fault heals (links, relays,
// providers). Within healBound of the heal exactly one provider runs the
// workload, Live, and the single-writer checks hold throughout: nobody is
// stranded evicted or fenced with nobody running it (a fenced former
// holder rejoins as a standby; an evicted one retakes).
func TestLivenessAfterHeal(t *testing.T) {
	var checks int
	var worst time.Duration
	props.CheckCI(t, 30, func(rt *rapid.T) {
		fs := faultSpace{MinK: 2, MaxK: 4, MinN: 3, MaxN: 5,
			MaxOffset: assumed.MaxClockOffset, MaxDriftPPM: assumed.MaxDriftPPM}
		w := newWorld(rt, leaseProtocol(), fs)
		sc, s := w.sc, w.s
		s.RunFor(drawDuration(rt, "warmup", time.Minute, 20*time.Minute))
		end := s.Now() + drawDuration(rt, "faultFor", time.Minute, time.Hour)
		for s.Now() < end {
			w.healableFault(rt)
			s.RunFor(drawDuration(rt, "between", 0, 10*time.Minute))
		}
		healed := s.Now()
		w.healAll()
		rt.Logf("t=%v every fault heals: %s", healed, s.Describe())
		bound := healBound(sc.K)
		oneRuns := func() bool { return runners(s, sc.K) == 1 && anyLive(s, sc.K) }
		at := s.RunWhile(healed+bound, func() bool { return !oneRuns() })
		if v := s.Violation(); v != nil {
			rt.Fatalf("%s at t=%v\ntimeline:\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
		}
		if at < 0 {
			rt.Fatalf("%d providers run the workload %v after every fault healed (bound %v): %s\ntimeline:\n%s",
				runners(s, sc.K), s.Now()-healed, bound, s.Describe(), sim.FormatTimeline(s.Timeline()))
		}
		s.RunFor(10 * time.Minute) // and it stays so
		if v := s.Violation(); v != nil {
			rt.Fatalf("%s at t=%v\ntimeline:\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
		}
		if n := runners(s, sc.K); n != 1 {
			rt.Fatalf("%d providers run the workload 10 min after one did: %s\ntimeline:\n%s", n, s.Describe(), sim.FormatTimeline(s.Timeline()))
		}
		checks++
		worst = max(worst, at-healed)
	})
	t.Logf("%d checks: one provider ran the workload at most %v after the heal (bound %v for 4 providers)",
		checks, worst.Round(time.Millisecond), healBound(4))
}

// healableFault applies one fault that healAll ends.
func (w *world) healableFault(t *rapid.T) {
	s, sc := w.s, w.sc
	switch rapid.IntRange(0, 5).Draw(t, "fault") {
	case 0:
		w.cutSubset(t, w.provider(t))
	case 1:
		r := w.relay(t)
		wipe := rapid.Bool().Draw(t, "wipe")
		t.Logf("t=%v R%d crashes (wipe %v)", s.Now(), r, wipe)
		s.CrashRelay(r, wipe)
	case 2:
		r := w.relay(t)
		t.Logf("t=%v R%d freezes", s.Now(), r)
		s.FreezeRelay(r)
	case 3:
		p, r := w.provider(t), w.relay(t)
		f := sim.LinkFaults{LossPct: rapid.IntRange(0, 60).Draw(t, "loss"), DupPct: rapid.IntRange(0, 60).Draw(t, "dup"),
			Reorder: rapid.Bool().Draw(t, "reorder")}
		t.Logf("t=%v link P%d-R%d faults %+v", s.Now(), p, r, f)
		s.SetLinkFaults(p, r, f)
	case 4:
		p := w.provider(t)
		node := rapid.Bool().Draw(t, "nodeCrash")
		t.Logf("t=%v P%d crashes (node %v)", s.Now(), p, node)
		s.CrashProvider(p, node)
	case 5:
		p := w.provider(t)
		d := drawDuration(t, "pause", 0, assumed.MaxPause)
		t.Logf("t=%v P%d pauses for %v", s.Now(), p, d)
		s.PauseFor(p, d)
	}
	_ = sc
}

// healAll ends every fault: relays up and thawed, links whole, providers up.
func (w *world) healAll() {
	s, sc := w.s, w.sc
	for r := 0; r < sc.N; r++ {
		s.RestartRelay(sim.RelayID(r))
		s.ThawRelay(sim.RelayID(r))
	}
	for p := 0; p < sc.K; p++ {
		for r := 0; r < sc.N; r++ {
			s.Heal(sim.ProviderID(p), sim.RelayID(r))
			s.SetLinkFaults(sim.ProviderID(p), sim.RelayID(r), sim.LinkFaults{})
		}
		s.RestartProvider(sim.ProviderID(p))
	}
}

func runners(s *sim.Sim, k int) int {
	n := 0
	for p := 0; p < k; p++ {
		if _, ok := s.Running(sim.ProviderID(p), workloadID); ok {
			n++
		}
	}
	return n
}

func anyLive(s *sim.Sim, k int) bool {
	for p := 0; p < k; p++ {
		if _, ok := s.Node(sim.ProviderID(p)).Live(workloadID); ok {
			return true
		}
	}
	return false
}

// TestLoneHolderCutOff: after a failover the new holder
// P1 has no standby the lease named left, and the former primary P0 is
// healthy again. When P1 is cut off every relay it must still fence itself
// on quorum loss: P0 rejoined as its standby (or, had it never heard epoch
// 2, would retake), and takes over once P1 has been silent for
// takeover_after, which it may only because P1 stopped by then. Exactly one
// runs at the end, never two; and the lease had a standby again within a
// heartbeat interval of the failover once P0 was back.
func TestLoneHolderCutOff(t *testing.T) {
	acrossSeeds(t, 10, 2, 2, 3, func(t *testing.T, s *sim.Sim) {
		s.RunUntil(5 * time.Minute)
		isolate(s, 0, 3) // P0 cut off: P1 takes over epoch 2
		p1 := s.Node(1).(*sim.LeaseNode)
		live2 := s.RunWhile(time.Hour, func() bool { e, ok := p1.Live(workloadID); return !ok || e != 2 })
		if live2 < 0 {
			t.Fatalf("P1 never Live at epoch 2\n%s", sim.FormatTimeline(s.Timeline()))
		}
		reconnect(s, 0, 3) // P0 healthy again: fenced, then P1's standby
		p0 := s.Node(0).(*sim.LeaseNode)
		rejoined := s.RunWhile(live2+time.Hour, func() bool {
			w, ok := p0.Machine().Workload(workloadID)
			return !ok || w.State != lease.StateStandby || w.Epoch != 2
		})
		if rejoined < 0 {
			t.Fatalf("P0 never rejoined as P1's standby: %s\n%s", s.Describe(), sim.FormatTimeline(s.Timeline()))
		}
		s.RunFor(10 * time.Minute)
		isolate(s, 1, 3) // the lone holder is cut off
		cut := s.Now()
		took := s.RunWhile(cut+healBound(2), func() bool { e, ok := p0.Live(workloadID); return !ok || e != 3 })
		if v := s.Violation(); v != nil {
			t.Fatalf("%s at %v\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
		}
		if took < 0 {
			t.Fatalf("P0 not Live at epoch 3 within %v of P1's cut: %s\n%s", healBound(2), s.Describe(), sim.FormatTimeline(s.Timeline()))
		}
		if _, ok := s.Running(1, workloadID); ok {
			t.Fatalf("P1 still runs the workload after P0 took over\n%s", sim.FormatTimeline(s.Timeline()))
		}
		t.Logf("standby again %v after P0 was back; P0 Live at epoch 3 %v after P1's cut", rejoined-live2, took-cut)
	})
}
