package sim_test

import (
	"testing"
	"time"

	"provideragent/props/sim"
)

func newAnchorWorld(t *testing.T, providers int) *sim.Sim {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Providers = providers
	cfg.Seed = 7
	nodes := make([]sim.Node, providers)
	for i := range nodes {
		nodes[i] = sim.NewAnchorNode(sim.DefaultAnchorConfig(), "w", sim.ProviderID(i))
	}
	s, err := sim.New(cfg, nodes, nil)
	if err != nil {
		t.Fatalf("New() = %v, want nil", err)
	}
	s.AddChecker(sim.SingleWriter("w", 2))
	s.Boot()
	return s
}

func TestAnchorHealthyNoFailover(t *testing.T) {
	s := newAnchorWorld(t, 3)
	s.RunFor(2 * time.Hour)
	if v := s.Violation(); v != nil {
		t.Fatalf("Violation() = %v, want nil\n%s", v.Msg, sim.FormatTimeline(v.Timeline))
	}
	if _, ok := s.Running(0, "w"); !ok {
		t.Fatalf("Running(P0) = false, want true\n%s", sim.FormatTimeline(s.Timeline()))
	}
	if s.Steps() < 1000 {
		t.Fatalf("Steps() = %d, want >= 1000", s.Steps())
	}
}

func TestAnchorPartitionedPrimaryTwoWriters(t *testing.T) {
	s := newAnchorWorld(t, 2)
	s.RunFor(10 * time.Minute)
	for r := 0; r < 3; r++ {
		s.Partition(0, sim.RelayID(r))
	}
	s.RunFor(20 * time.Minute)
	v := s.Violation()
	if v == nil {
		t.Fatalf("Violation() = nil, want two writers\n%s", sim.FormatTimeline(s.Timeline()))
	}
	t.Logf("%s at %v\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
}

func newLeaseWorld(t *testing.T, providers, m, n int) *sim.Sim {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Providers, cfg.Relays, cfg.Seed = providers, n, 11
	cfg.TickInterval = time.Second
	lc := sim.LeaseConfig(m, n)
	spec := sim.LeaseSpec(lc, "w", providers)
	nodes := make([]sim.Node, providers)
	for i := range nodes {
		nodes[i] = sim.NewLeaseNode(lc, spec, sim.ProviderID(i), providers)
	}
	s, err := sim.New(cfg, nodes, nil)
	if err != nil {
		t.Fatalf("New() = %v, want nil", err)
	}
	s.AddChecker(sim.SingleWriter("w", 2))
	s.Boot()
	return s
}

func TestLeaseHealthyNoFailover(t *testing.T) {
	s := newLeaseWorld(t, 3, 2, 3)
	s.RunFor(2 * time.Hour)
	if v := s.Violation(); v != nil {
		t.Fatalf("Violation() = %v, want nil\n%s", v.Msg, sim.FormatTimeline(v.Timeline))
	}
	if got := s.Describe(); got != "P0:live@1 P1:standby@1 P2:standby@1 " {
		t.Fatalf("Describe() = %q, want all healthy\n%s", got, sim.FormatTimeline(s.Timeline()))
	}
	t.Logf("steps %d\n%s", s.Steps(), sim.FormatTimeline(s.Timeline()))
}

func TestLeaseKilledPrimaryFailsOver(t *testing.T) {
	s := newLeaseWorld(t, 3, 2, 3)
	s.RunFor(10 * time.Minute)
	s.Kill(0)
	s.RunFor(30 * time.Minute)
	if v := s.Violation(); v != nil {
		t.Fatalf("Violation() = %v, want nil\n%s", v.Msg, sim.FormatTimeline(v.Timeline))
	}
	if _, ok := s.Running(1, "w"); !ok {
		t.Fatalf("Running(P1) = false, want true\n%s", sim.FormatTimeline(s.Timeline()))
	}
	t.Logf("%s\n%s", s.Describe(), sim.FormatTimeline(s.Timeline()))
}

func TestClockSimInvertsLocal(t *testing.T) {
	clocks := []sim.Clock{
		{},
		{Offset: 15 * time.Second, DriftPPM: 1000, Period: time.Hour},
		{Offset: -15 * time.Second, DriftPPM: -1000, Period: time.Hour},
		{Offset: time.Hour, DriftPPM: 600_000},
		{Offset: -time.Hour, DriftPPM: -600_000},
	}
	for _, c := range clocks {
		for _, at := range []time.Duration{0, time.Second, 59 * time.Minute, 61 * time.Minute, 5 * time.Hour} {
			local := c.Local(at)
			got := c.Sim(local)
			if d := got - at; d < 0 || d > time.Millisecond {
				t.Errorf("%+v: Sim(Local(%v)) = %v, want %v (+<=1ms)", c, at, got, at)
			}
			if c.Local(got).Before(local) {
				t.Errorf("%+v: Local(Sim(%v)) = %v, want >= %v", c, local, c.Local(got), local)
			}
		}
	}
}
