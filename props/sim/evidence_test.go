package sim

import (
	"fmt"
	"testing"
	"time"

	"provideragent/lease"
)

// quorumMarked is the value of the newest checkpoint of p that a heartbeat
// listed on at least m relays' storage now: published with quorum, its
// evidence too.
func quorumMarked(s *Sim, p ProviderID, m int) (uint64, bool) {
	seqs := map[uint64]map[RelayID]bool{}
	for r := range s.Config().Relays {
		for _, ev := range s.Stored(RelayID(r)) {
			b, ok := ev.Body.(LeaseHeartbeat)
			if !ok || ev.Author != p {
				continue
			}
			for _, we := range b.Workloads {
				if we.ID == "w" && !we.Checkpoint.IsZero() {
					if seqs[we.Checkpoint.Seq] == nil {
						seqs[we.Checkpoint.Seq] = map[RelayID]bool{}
					}
					seqs[we.Checkpoint.Seq][RelayID(r)] = true
				}
			}
		}
	}
	var best uint64
	for seq, rs := range seqs {
		if len(rs) >= m && seq > best {
			best = seq
		}
	}
	if best == 0 {
		return 0, false
	}
	b, ok := s.blobs[blobID(p, "w", 1, best)]
	return b.value, ok
}

// TestRequiredRestoreAfterRecordsWiped: the holder is cut off every relay,
// then two of the three relays lose their storage (every checkpoint
// record of it there gone); the standby takes over and, under
// restore=required, never starts from less than the newest checkpoint
// whose mark a heartbeat carried to M relays before the cut (the relays'
// storage read just before it). Before heartbeats carried marks it read
// N-M+1 relays, found no record, and started from nothing.
func TestRequiredRestoreAfterRecordsWiped(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s := durableWorld(t, 2, lease.RestoreRequired, seed)
			s.RunFor(10 * time.Minute)
			want, ok := quorumMarked(s, 0, 2)
			if !ok {
				t.Fatalf("no checkpoint mark on 2 relays after 10 min\n%s", FormatTimeline(s.Timeline()))
			}
			cutOff(s, 0)
			s.RunFor(time.Minute)
			s.CrashRelay(0, true)
			s.CrashRelay(1, true)
			s.RunFor(10 * time.Second)
			s.RestartRelay(0)
			s.RestartRelay(1)
			if s.RunWhile(s.Now()+time.Hour, func() bool { _, ok := s.Running(1, "w"); return !ok }) < 0 {
				t.Fatalf("P1 never took over\n%s", FormatTimeline(s.Timeline()))
			}
			wantNoViolation(t, s)
			st := notes(s, 1, NoteStarted)
			if len(st) == 0 || st[0].Value < want {
				t.Fatalf("P1 started %+v, want from at least %d (the newest checkpoint whose mark reached 2 relays)\n%s", st, want, FormatTimeline(s.Timeline()))
			}
		})
	}
}

// TestRequiredRestoreThroughABlobOutage: the primary dies for good; every
// blob server is down when its only standby takes over, and comes back
// 20 s later (within provision_timeout: a later attempt restores) or
// 6 min later (beyond it). Past provision_timeout the standby's required
// restore hands the workload on (nobody else is alive) and takes it back
// by the retake rule, restoring then: the workload runs again from at
// least the newest checkpoint its heartbeats named, within
// provision_timeout + takeover_after + the proof lag + two claim timeouts
// and a restore timeout of the servers' return. It used to fail the
// workload for good.
func TestRequiredRestoreThroughABlobOutage(t *testing.T) {
	lc := LeaseConfig(2, 3)
	bound := lc.ProvisionTimeout + lc.TakeoverAfter + lc.HeartbeatInterval + 2*lc.RelayDelay + 2*lc.ClaimTimeout + 30*time.Second
	for i := range 20 {
		seed := uint64(i + 1)
		outage := []time.Duration{20 * time.Second, 6 * time.Minute}[i%2]
		t.Run(fmt.Sprintf("seed %d outage %v", seed, outage), func(t *testing.T) {
			s := durableWorld(t, 2, lease.RestoreRequired, seed)
			s.RunFor(10 * time.Minute)
			want, ok := quorumMarked(s, 0, 2)
			if !ok {
				t.Fatalf("no checkpoint mark on 2 relays after 10 min\n%s", FormatTimeline(s.Timeline()))
			}
			s.Kill(0)
			if s.RunWhile(s.Now()+time.Hour, func() bool { return !restoring(s, 1) }) < 0 {
				t.Fatalf("P1 never began restoring\n%s", FormatTimeline(s.Timeline()))
			}
			s.BlobsDown(true)
			s.RunFor(outage)
			s.BlobsDown(false)
			back := s.Now()
			if s.RunWhile(back+2*bound, func() bool { _, ok := s.Running(1, "w"); return !ok }) < 0 {
				t.Fatalf("P1 never ran the workload after the servers came back\n%s", FormatTimeline(s.Timeline()))
			}
			wantNoViolation(t, s)
			took := s.Now() - back
			st := notes(s, 1, NoteStarted)
			if len(st) == 0 || st[0].Value < want {
				t.Fatalf("P1 started %+v, want from at least %d\n%s", st, want, FormatTimeline(s.Timeline()))
			}
			if took > bound {
				t.Fatalf("P1 ran %v after the servers came back, want within %v\n%s", took, bound, FormatTimeline(s.Timeline()))
			}
			t.Logf("running %v after the servers came back (bound %v), from value %d (newest marked %d)", took, bound, st[0].Value, want)
		})
	}
}
