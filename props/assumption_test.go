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

// TestAssumptionClockSkew: clocks that drift 30-60 % apart (the primary's
// slow, the standbys' fast; the bound is props.Assumptions.MaxDriftPPM =
// 0.1 %) let a standby's TakeoverAfter elapse before the cut-off primary's
// self-fencing time does.
func TestAssumptionClockSkew(t *testing.T) {
	cfg := lease.DefaultConfig()
	requireCounterexample(t, "clock-skew", faultSpace{
		MinK: 2, MaxK: 2, MinN: 3, MaxN: 3, FixedM: 2,
		MaxOffset:   10 * cfg.MaxSkew,
		MinDriftPPM: 300_000, MaxDriftPPM: 600_000,
		MaxAdvance: 10 * time.Minute,
		Partitions: true,
		OnlyRelay:  -1,
	})
}

// TestAssumptionMessageDelay: relays that deliver two providers' events to
// each other 10-60 min late (the bound is RelayDelay = 10 s) hide a healthy
// holder from its standby and hide the standby's claim from the holder.
func TestAssumptionMessageDelay(t *testing.T) {
	requireCounterexample(t, "message-delay", faultSpace{
		MinK: 2, MaxK: 2, MinN: 3, MaxN: 3, FixedM: 2,
		MaxAdvance:    10 * time.Minute,
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
		MinPause:   25 * time.Minute,
		MaxPause:   time.Hour,
		OnlyRelay:  -1,
	})
}
