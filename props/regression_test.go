package props_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"provideragent/props/sim"
)

// scriptedWorld builds a lease world without rapid, for fixed schedules.
func scriptedWorld(t *testing.T, k, m, n int, seed uint64) *sim.Sim {
	t.Helper()
	proto := leaseProtocol()
	cfg := proto.cfg
	cfg.Providers, cfg.Relays, cfg.Seed = k, n, seed
	s, err := sim.New(cfg, proto.nodes(scenario{K: k, M: m, N: n}), nil)
	if err != nil {
		t.Fatalf("sim.New() = %v, want nil", err)
	}
	s.AddChecker(sim.SingleWriter(workloadID))
	s.Boot()
	return s
}

func isolate(s *sim.Sim, p sim.ProviderID, n int) {
	for r := 0; r < n; r++ {
		s.Partition(p, sim.RelayID(r))
	}
}

func reconnect(s *sim.Sim, p sim.ProviderID, n int) {
	for r := 0; r < n; r++ {
		s.Heal(p, sim.RelayID(r))
	}
}

// TestStandbyOutageIsNotSilence: a standby that was itself cut off from
// every relay (or down) must not count its own outage as the holder's
// silence. Found by TestSingleWriter (seed under
// testdata/rapid/TestSingleWriter/): lease's takeover check once required
// the standby to be healthy only at the moment of the check, so a standby
// back after TakeoverAfter claimed at once while a holder that lost quorum
// shortly before was still inside its self-fencing time: two writers.
// Fixed in lease 921d1ec.
func TestStandbyOutageIsNotSilence(t *testing.T) {
	tests := []struct {
		name  string
		apply func(s *sim.Sim)
	}{
		{"standby partitioned", func(s *sim.Sim) {
			s.RunUntil(100 * time.Second)
			isolate(s, 1, 3) // the standby loses every relay
			s.RunUntil(700 * time.Second)
			isolate(s, 0, 3) // the holder loses every relay, starts self-fencing
			s.RunUntil(900 * time.Second)
			reconnect(s, 1, 3) // the standby is back; the holder's last heartbeat is stale by now
			s.RunUntil(1500 * time.Second)
		}},
		{"standby crashed and restarted", func(s *sim.Sim) {
			s.CrashProvider(1, true)
			s.RunUntil(488 * time.Second)
			isolate(s, 0, 3)
			s.RunUntil(720 * time.Second)
			s.RestartProvider(1)
			s.RunUntil(1500 * time.Second)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := scriptedWorld(t, 2, 2, 3, 1)
			tc.apply(s)
			if v := s.Violation(); v != nil {
				t.Fatalf("%s at %v, want one writer\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
			}
			t.Logf("%s\n%s", s.Describe(), sim.FormatTimeline(s.Timeline()))
		})
	}
}

// midStepCrashSeed is the rapid seed file of TestMidStepCrash's failure.
const midStepCrashSeed = "testdata/rapid/TestMidStepCrash/TestMidStepCrash-20261122083317-9693.fail"

// TestMidStepCrash: the agent crashes after persisting a step and before
// performing its effects (its workload left running), then restarts and
// follows lease/doc.go literally: Restore, re-issue Outstanding(),
// resubscribe, RelaySynced on EOSE. A lost StopWorkload is never re-issued:
// the restored machine is evicted, failed or fenced while the process still
// runs, and the standby the persisted revocation names starts a second copy.
// Skipped until lease's Outstanding (or its driver protocol) re-issues the
// stop for workloads in non-holding states; TestMidStepCrashReconciled shows
// that such a stop restores the guarantee.
func TestMidStepCrash(t *testing.T) {
	t.Skipf("known gap in lease's restart protocol (a StopWorkload lost between persist and perform is never re-issued); seed file %s", midStepCrashSeed)
	var st stats
	fs := withinBounds()
	fs.MidStepCrash = true
	rapid.Check(t, runSafety(leaseProtocol(), fs, &st))
	t.Logf("%v", &st)
}

// TestMidStepCrashReconciled is TestMidStepCrash with a driver that, after a
// restart, stops any running process whose workload the machine does not
// hold (sim.LeaseNode.SetReconcile).
func TestMidStepCrashReconciled(t *testing.T) {
	var st stats
	fs := withinBounds()
	fs.MidStepCrash = true
	proto := leaseProtocol()
	nodes := proto.nodes
	proto.nodes = func(sc scenario) []sim.Node {
		ns := nodes(sc)
		for _, n := range ns {
			n.(*sim.LeaseNode).SetReconcile(true)
		}
		return ns
	}
	rapid.Check(t, runSafety(proto, fs, &st))
	t.Logf("%v", &st)
}

// processExitsSeed is the rapid seed file of TestProcessExits' failure.
const processExitsSeed = "testdata/rapid/TestProcessExits/TestProcessExits-20261122083413-11442.fail"

// TestProcessExits: TestSingleWriter with workload processes that exit on
// their own, so the restart policy (respawn with backoff) runs amid every
// other fault, the driver following lease/doc.go literally ("AttemptRespawn:
// at At, restart the process"). Two schedules give two writers:
//   - after a restart, Outstanding() re-issues a pending AttemptRespawn
//     whose At has passed; the driver restarts the process at once, before
//     any relay sync (rule 10), while a standby already runs a higher epoch
//     (the seed file below);
//   - a respawn falls due just after the machine left Respawning (evicted
//     at T1+T2 of quorum loss, with the revocation out); the driver
//     restarts a process the machine has fenced while the successor starts.
//
// Skipped until lease's protocol tells the driver to perform a respawn only
// while the machine still wants it (Respawning at that attempt, not awaiting
// sync), or cancels it with an effect; TestProcessExitsGuarded shows that
// such a guard restores the guarantee.
func TestProcessExits(t *testing.T) {
	t.Skipf("known gap in lease's restart protocol (a re-issued AttemptRespawn restarts the process before relay sync); seed file %s", processExitsSeed)
	var st stats
	fs := withinBounds()
	fs.ProcessExits = true
	rapid.Check(t, runSafety(leaseProtocol(), fs, &st))
	t.Logf("%v", &st)
}

// TestProcessExitsGuarded is TestProcessExits with a driver that performs
// an AttemptRespawn only while the machine still wants it and has synced
// (sim.LeaseNode.SetRespawnGuard).
func TestProcessExitsGuarded(t *testing.T) {
	var st stats
	fs := withinBounds()
	fs.ProcessExits = true
	proto := leaseProtocol()
	nodes := proto.nodes
	proto.nodes = func(sc scenario) []sim.Node {
		ns := nodes(sc)
		for _, n := range ns {
			n.(*sim.LeaseNode).SetRespawnGuard(true)
		}
		return ns
	}
	rapid.Check(t, runSafety(proto, fs, &st))
	t.Logf("%v", &st)
}
