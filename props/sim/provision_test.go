package sim

import (
	"fmt"
	"testing"
	"time"

	"provideragent/lease"
)

// TestProvisionTimeoutEvictsAndRetakes: a standby that won its claim
// (P0 cut off for good) has its node crash as it begins provisioning and
// boots again while its relays are unreachable: it stays provisioning
// without relay quorum past provision_timeout. Rule 11 used to fail the
// workload for good there: with P0 gone nobody ran it again. It is
// evicted now, as a Live holder losing quorum would be, and once P1's
// relays are back it takes the workload back by the retake rule, at the
// next epoch, with no second writer.
func TestProvisionTimeoutEvictsAndRetakes(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Providers, cfg.Relays, cfg.Seed = 2, 3, seed
			lc := LeaseConfig(2, 3)
			spec := LeaseSpec(lc, "w", 2)
			s, err := New(cfg, []Node{NewLeaseNode(lc, spec, 0, 2), NewLeaseNode(lc, spec, 1, 2)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.AddChecker(SingleWriter("w", 2))
			s.Boot()
			s.RunFor(100 * time.Second)
			cutOff(s, 0)
			state := func() (lease.State, uint64) {
				m := s.Node(1).(*LeaseNode).Machine()
				if m == nil {
					return "", 0
				}
				w, _ := m.Workload("w")
				return w.State, w.Epoch
			}
			if s.RunWhile(s.Now()+time.Hour, func() bool { st, e := state(); return st != lease.StateProvisioning || e != 2 }) < 0 {
				t.Fatalf("P1 never provisioned epoch 2\n%s", FormatTimeline(s.Timeline()))
			}
			s.CrashProvider(1, true)
			cutOff(s, 1)
			s.RunFor(lc.Stale)
			s.RestartProvider(1)
			s.RunFor(lc.ProvisionTimeout)
			if st, e := state(); st != lease.StateEvicted || e != 2 {
				t.Fatalf("P1 past provision_timeout without relays: %s at epoch %d, want evicted at 2\n%s", st, e, FormatTimeline(s.Timeline()))
			}
			for r := range cfg.Relays {
				s.Heal(1, RelayID(r))
			}
			if s.RunWhile(s.Now()+time.Hour, func() bool { e, ok := s.Node(1).Live("w"); return !ok || e < 3 }) < 0 {
				t.Fatalf("P1 never took the workload back\n%s", FormatTimeline(s.Timeline()))
			}
			wantNoViolation(t, s)
		})
	}
}
