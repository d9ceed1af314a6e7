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
// Until the lease defect pinned by TestStandbyOutageIsNotSilence is fixed,
// outages (partitions, isolation, crashes, pauses) hit only the provider
// running the workload; relay faults, link faults and kills hit anyone.
// TestSingleWriterKnownLeaseBug runs the unrestricted search.
func TestSingleWriter(t *testing.T) {
	fs := withinBounds()
	fs.HolderFaultsOnly = true
	var st stats
	rapid.Check(t, runSafety(leaseProtocol(), fs, &st))
	t.Logf("%v", &st)
}

// TestSingleWriterKnownLeaseBug is TestSingleWriter with outages hitting
// standbys too. It finds two writers within a few dozen checks (seed file
// under testdata/rapid/TestSingleWriterKnownLeaseBug/): lease's takeover
// rule counts a standby's own outage as the holder's silence. Remove the
// skip once lease is fixed; the seed then replays as a regression test.
func TestSingleWriterKnownLeaseBug(t *testing.T) {
	t.Skipf("known lease defect, replay with the seed file %s (see TestStandbyOutageIsNotSilence)", knownLeaseBugStandbyOutage)
	var st stats
	rapid.Check(t, runSafety(leaseProtocol(), withinBounds(), &st))
	t.Logf("%v", &st)
}
