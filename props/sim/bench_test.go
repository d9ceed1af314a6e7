package sim_test

import (
	"testing"
	"time"

	"provideragent/props/sim"
)

// benchWorld runs one simulated hour of a healthy 4-provider, 5-relay world
// and returns the number of events processed.
func benchWorld(b *testing.B, lease bool) uint64 {
	b.Helper()
	const k, m, n = 4, 3, 5
	cfg := sim.DefaultConfig()
	cfg.Providers, cfg.Relays, cfg.Seed, cfg.TickInterval = k, n, 1, time.Second
	nodes := make([]sim.Node, k)
	lc := sim.LeaseConfig(m, n)
	spec := sim.LeaseSpec(lc, "w", k)
	ac := sim.DefaultAnchorConfig()
	ac.M, ac.N, ac.HeartbeatInterval = m, n, lc.HeartbeatInterval
	for i := range nodes {
		if lease {
			nodes[i] = sim.NewLeaseNode(lc, spec, sim.ProviderID(i), k)
		} else {
			nodes[i] = sim.NewAnchorNode(ac, "w", sim.ProviderID(i))
		}
	}
	s, err := sim.New(cfg, nodes, nil)
	if err != nil {
		b.Fatalf("New() = %v, want nil", err)
	}
	s.AddChecker(sim.SingleWriter("w", 2))
	s.Boot()
	s.RunFor(time.Hour)
	if v := s.Violation(); v != nil {
		b.Fatalf("Violation() = %v, want nil", v.Msg)
	}
	return s.Steps()
}

// BenchmarkSimulatedHour measures one simulated hour of a healthy world
// (4 providers, 5 relays, ticks every second, heartbeats every minute) with
// lease machines, against the same world with the anchor's trivial model as
// the baseline measured in the same run: the ratio is the cost of the lease
// machine and its driver over the bare simulator.
func BenchmarkSimulatedHour(b *testing.B) {
	var events uint64
	var leaseNs, anchorNs int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		t0 := time.Now()
		benchWorld(b, false)
		anchorNs += time.Since(t0).Nanoseconds()
		b.StartTimer()
		t1 := time.Now()
		events += benchWorld(b, true)
		leaseNs += time.Since(t1).Nanoseconds()
	}
	b.ReportMetric(float64(events)/(float64(leaseNs)/1e9), "events/s")
	b.ReportMetric(float64(time.Hour)*float64(b.N)/float64(leaseNs), "sim-s/wall-s")
	b.ReportMetric(float64(leaseNs)/float64(anchorNs), "x-anchor-baseline")
}
