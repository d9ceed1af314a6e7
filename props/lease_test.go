package props_test

import (
	"testing"
	"time"

	"provideragent/lease"
	"provideragent/props"
	"provideragent/props/sim"
)

// assumed are the bounds the guarantee rests on for lease.DefaultConfig.
var assumed = props.AssumptionsFor(lease.DefaultConfig())

func TestAssumptionsFitDefaultConfig(t *testing.T) {
	cfg := lease.DefaultConfig()
	if err := assumed.Validate(cfg); err != nil {
		t.Fatalf("AssumptionsFor(DefaultConfig()).Validate() = %v, want nil", err)
	}
	tests := []struct {
		name string
		mod  func(*props.Assumptions)
	}{
		{"offset", func(a *props.Assumptions) { a.MaxClockOffset = cfg.MaxSkew }},
		{"delay", func(a *props.Assumptions) { a.MaxDelay = 2 * cfg.RelayDelay }},
		{"pause", func(a *props.Assumptions) { a.MaxPause = props.Margin(cfg) }},
		{"drift", func(a *props.Assumptions) { a.MaxDriftPPM = 1e6 }},
		{"agent death grace", func(a *props.Assumptions) { a.AgentDeathGrace = props.Margin(cfg) }},
		{"workloads outlive the agent", func(a *props.Assumptions) { a.AgentDeathGrace = -1 }},
		{"stop grace", func(a *props.Assumptions) { a.StopGrace = props.Margin(cfg) }},
		{"claims kept", func(a *props.Assumptions) { a.ClaimsKeptLive = cfg.HeartbeatInterval }},
	}
	for _, tc := range tests {
		a := assumed
		tc.mod(&a)
		if err := a.Validate(cfg); err == nil {
			t.Errorf("Validate(%s exceeded: %+v) = nil, want an error", tc.name, a)
		}
	}
}

// leaseProtocol runs provider-agent's rule (lease.Machine driven like the
// agent) under lease.DefaultConfig, with network legs of MaxDelay/2.
func leaseProtocol() protocol {
	cfg := sim.DefaultConfig()
	cfg.LegDelay = assumed.MaxDelay / 2
	cfg.TickInterval = assumed.TickInterval
	cfg.AgentDeathGrace = assumed.AgentDeathGrace
	cfg.StopTime = assumed.StopGrace
	return protocol{
		name: "provider-agent's rule (lease.DefaultConfig)",
		cfg:  cfg,
		nodes: func(sc scenario) []sim.Node {
			lc := sim.LeaseConfig(sc.M, sc.N)
			spec := sim.LeaseSpec(lc, workloadID, sc.K)
			nodes := make([]sim.Node, sc.K)
			for i := range nodes {
				nodes[i] = sim.NewLeaseNode(lc, spec, sim.ProviderID(i), sc.K)
			}
			return nodes
		},
	}
}

// withinBounds is every fault the simulator has, with clocks, delays and
// pauses inside the stated assumptions.
func withinBounds() faultSpace {
	return faultSpace{
		MinK: 2, MaxK: 4, MinN: 3, MaxN: 5,
		MaxOffset:      assumed.MaxClockOffset,
		MaxDriftPPM:    assumed.MaxDriftPPM,
		MaxAdvance:     10 * time.Minute,
		HiddenBeats:    true,
		Partitions:     true,
		RelayCrashes:   true,
		Wipes:          true,
		LinkFaults:     true,
		Replays:        true,
		ProviderCrash:  true,
		Kills:          true,
		MaxPause:       assumed.MaxPause,
		OnlyRelay:      -1,
		Targeted:       true,
		Forgeries:      true,
		CommitFailures: true,
	}
}
