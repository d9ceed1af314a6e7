package props_test

import (
	"testing"

	"pgregory.net/rapid"
)

// TestSingleWriter: under any schedule of faults within the assumptions
// (see props.AssumptionsFor), at no simulated instant do two providers run
// the workload, no two providers hold it Live at the same epoch, and the
// epoch a provider holds Live never goes backwards. Checked after every
// simulated event.
//
// The seed under testdata/rapid/TestSingleWriter/ replays first: a standby
// that counted its own outage as the holder's silence (fixed in lease
// 921d1ec; see TestStandbyOutageIsNotSilence).
func TestSingleWriter(t *testing.T) {
	var st stats
	rapid.Check(t, runSafety(leaseProtocol(), withinBounds(), &st))
	t.Logf("%v", &st)
}
