package props_test

import (
	"testing"
	"time"

	"provideragent/lease"
)

// The TestAssumption tests drop one bound at a time, by a wide margin, and
// assert that rapid then finds a two-writer schedule for provider-agent's
// rule; each logs the shrunk counterexample. Their fault spaces are biased
// toward the violating region (the bound exceeded many times over, few
// providers and relays) so that the default run always finds one.

func requireCounterexample(t *testing.T, name string, fs faultSpace) {
	t.Helper()
	found, out := expectCounterexample(t, name, runSafety(leaseProtocol(), fs, nil))
	if !found {
		t.Fatalf("rapid.Check(%s) found no two-writer schedule, want one:\n%s", name, out)
	}
	t.Logf("shrunk two-writer schedule with the %s bound exceeded:\n%s", name, out)
}

// TestAssumptionClockSkew drops the clock bounds, each on its own:
//   - offset: the primary's clock 5-20 min off (the bound is
//     props.Assumptions.MaxClockOffset = MaxSkew/2 = 15 s), so the standby
//     never counts its heartbeats (stale, or from the future) and its
//     takeover wait runs from the start while the primary still holds;
//   - drift: clocks that run 30-60 % apart (the primary's slow, the
//     standbys' fast; the bound is props.Assumptions.MaxDriftPPM = 0.1 %),
//     so a standby's TakeoverAfter elapses before the cut-off primary's
//     self-fencing time does.
func TestAssumptionClockSkew(t *testing.T) {
	cfg := lease.DefaultConfig()
	t.Run("offset", func(t *testing.T) {
		requireCounterexample(t, "clock-offset", faultSpace{
			MinK: 2, MaxK: 2, MinN: 3, MaxN: 3, FixedM: 2,
			MinOffset: 10 * cfg.MaxSkew, MaxOffset: 40 * cfg.MaxSkew,
			MaxAdvance: 10 * time.Minute,
			Warmup:     5 * time.Minute,
			Partitions: true,
			OnlyRelay:  -1,
		})
	})
	t.Run("drift", func(t *testing.T) {
		requireCounterexample(t, "clock-drift", faultSpace{
			MinK: 2, MaxK: 2, MinN: 3, MaxN: 3, FixedM: 2,
			MinDriftPPM: 300_000, MaxDriftPPM: 600_000,
			MaxAdvance: 10 * time.Minute,
			Warmup:     5 * time.Minute,
			Partitions: true,
			OnlyRelay:  -1,
		})
	})
}

// TestAssumptionMessageDelay: relays that deliver two providers' events to
// each other 10-60 min late (the bound is RelayDelay = 10 s) hide a healthy
// holder from its standby and hide the standby's claim from the holder.
func TestAssumptionMessageDelay(t *testing.T) {
	requireCounterexample(t, "message-delay", faultSpace{
		MinK: 2, MaxK: 2, MinN: 3, MaxN: 3, FixedM: 2,
		MaxAdvance:    10 * time.Minute,
		Warmup:        5 * time.Minute,
		ExtraDelay:    time.Hour,
		MinExtraDelay: 10 * time.Minute,
		OnlyRelay:     -1,
	})
}

// TestAssumptionPause: an agent stalled for 25-60 min (the bound is
// props.Assumptions.MaxPause, half the margin) cannot fence the workload it
// leaves running while a standby takes over.
func TestAssumptionPause(t *testing.T) {
	requireCounterexample(t, "pause", faultSpace{
		MinK: 2, MaxK: 2, MinN: 3, MaxN: 3, FixedM: 2,
		MaxAdvance: 10 * time.Minute,
		Warmup:     5 * time.Minute,
		MinPause:   25 * time.Minute,
		MaxPause:   time.Hour,
		OnlyRelay:  -1,
	})
}

// TestAssumptionWorkloadsDieWithAgent: an agent that crashes (its node
// stays up) and leaves its workload running for 25-60 min (the bound is
// props.Assumptions.AgentDeathGrace, the backend's stop grace) cannot fence
// it while a standby takes over. The process backend's supervisor is what
// makes the workload die with its agent.
func TestAssumptionWorkloadsDieWithAgent(t *testing.T) {
	requireCounterexample(t, "agent-death", faultSpace{
		MinK: 2, MaxK: 2, MinN: 3, MaxN: 3, FixedM: 2,
		MaxAdvance:            10 * time.Minute,
		Warmup:                5 * time.Minute,
		Partitions:            true,
		ProviderCrash:         true,
		WorkloadsOutliveAgent: true,
		MinAgentDown:          25 * time.Minute,
		MaxAgentDown:          time.Hour,
		OnlyRelay:             -1,
	})
}
