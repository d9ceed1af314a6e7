package props_test

import (
	"testing"
	"time"

	"provideragent/props"
	"provideragent/props/sim"
)

// TestSingleWriter: under any schedule of faults within the assumptions
// (see props.AssumptionsFor), at no simulated instant do two providers run
// the workload, no two providers hold it Live at the same epoch, and the
// epoch a provider holds Live never goes backwards. Checked after every
// simulated event.
//
// The seeds under testdata/rapid/TestSingleWriter/ replay first (rapid
// replays every fail file there): a standby that counted its own outage as
// the holder's silence (fixed in lease 921d1ec; see
// TestStandbyOutageIsNotSilence), and an evicted holder that retook while
// another provider held its epoch, claimed again after two relays lost
// their storage (seed 2070523810; lease's yieldsEpoch).
func TestSingleWriter(t *testing.T) {
	var st stats
	props.Check(t, runSafety(leaseProtocol(), withinBounds(), &st))
	t.Logf("%v", &st)
}

// TestTakeoverNeverEarly states the takeover bound directly: with every
// fault of TestEveryFault, no standby publishes a claim by takeover of epoch
// e earlier than TakeoverAfter (less the drift allowance) after a heartbeat
// listing the workload at e was published and delivered to it from M relays
// (sim.AddTakeoverBound; the M-th newest delivery per relay counts, since
// the standby needs silence on N-M+1 relays and any M relays include one of
// them). TestProcessExits seed 9280212158 broke it 343 s after the holder's
// last heartbeat: the standby followed a rival whose claim stood (adopted,
// its withdrawal unseen) and ignored the heartbeats of the provider that
// had won the epoch (lease's TestSilenceCountsOnlyTheProviderHeardHolding).
func TestTakeoverNeverEarly(t *testing.T) {
	var st stats
	fs := withinBounds()
	fs.MidStepCrash = true
	fs.ProcessExits = true
	fs.CheckTakeoverBound = true
	props.Check(t, runSafety(leaseProtocol(), fs, &st))
	t.Logf("%v", &st)
}

// TestShardedBeats is TestTakeoverNeverEarly with every beat split over
// three heartbeat events (the workload in one of them, as the agent splits
// long lists), so that loss, duplicates, reordering, relay crashes and
// partitions hit parts of beats: a beat counts for its provider on a relay
// only once all its shards came from it.
func TestShardedBeats(t *testing.T) {
	var st stats
	proto := leaseProtocol()
	proto.name += ", beats in 3 shards"
	leaseNodes := proto.nodes
	proto.nodes = func(sc scenario) []sim.Node {
		ns := leaseNodes(sc)
		for _, n := range ns {
			n.(*sim.LeaseNode).ShardBeats(3)
		}
		return ns
	}
	fs := withinBounds()
	fs.MidStepCrash = true
	fs.ProcessExits = true
	fs.CheckTakeoverBound = true
	props.CheckCI(t, 30, runSafety(proto, fs, &st))
	t.Logf("%v", &st)
}

// TestLateDeliveries is TestSingleWriter aimed at late deliveries: three or
// four providers over three relays (M=2), partitions, relay crashes and
// wipes, reboots, and the lateRevocation schedule (a successor that hears
// its holder's revocation only after another standby took over and a relay
// lost the new holder's claim). Without lease's revocation deadline it
// finds two holders of epoch 2.
func TestLateDeliveries(t *testing.T) {
	var st stats
	fs := lateDeliveries()
	props.CheckCI(t, 60, runSafety(leaseProtocol(), fs, &st))
	t.Logf("%v", &st)
}

// lateDeliveries is the fault space of TestLateDeliveries.
func lateDeliveries() faultSpace {
	return faultSpace{
		MinK: 3, MaxK: 4, MinN: 3, MaxN: 3, FixedM: 2,
		MaxOffset:     assumed.MaxClockOffset,
		MaxDriftPPM:   assumed.MaxDriftPPM,
		MaxAdvance:    10 * time.Minute,
		Warmup:        2 * time.Minute,
		Partitions:    true,
		RelayCrashes:  true,
		Wipes:         true,
		ProviderCrash: true,
		OnlyRelay:     -1,
		Targeted:      true,
	}
}
