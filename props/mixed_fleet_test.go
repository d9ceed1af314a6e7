package props_test

import (
	"testing"

	"provideragent/props"

	"provideragent/props/sim"
)

// TestMixedFleetPaygressPrimary: a Paygress v1 primary (the anchor's rule:
// heartbeats without a workload list, self-eviction after t1+t2, no epochs,
// deaf to claims) watched by provider-agent standbys. Our takeover rule
// alone must keep the single-writer guarantee: TakeoverAfter (720 s)
// exceeds the anchor primary's worst self-fencing time (stale + t1 + t2 =
// 600 s) plus the relay delay, under every fault within the bounds.
func TestMixedFleetPaygressPrimary(t *testing.T) {
	var st stats
	proto := leaseProtocol()
	proto.name = "Paygress (anchor) primary, provider-agent standbys"
	leaseNodes := proto.nodes
	proto.nodes = func(sc scenario) []sim.Node {
		ns := leaseNodes(sc)
		ac := sim.DefaultAnchorConfig()
		ac.M, ac.N = sc.M, sc.N
		ns[0] = sim.NewAnchorNode(ac, workloadID, 0)
		return ns
	}
	fs := withinBounds()
	fs.ProviderCrash = false // the anchor model persists nothing worth restoring
	props.CheckCI(t, 50, runSafety(proto, fs, &st))
	t.Logf("%v", &st)
}
