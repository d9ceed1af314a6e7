package sim

import (
	"testing"
	"time"

	"provideragent/lease"
	"provideragent/lease/leasetest"
)

// TestLeaseNodePerformsEveryEffectByItsClass is the simulator's half of
// agent's TestAgentPerformsEveryEffectByItsClass: the LeaseNode builds an
// outbox event exactly for the effects lease.DurabilityOf puts in the
// outbox, and performs every effect type without a driver error.
func TestLeaseNodePerformsEveryEffectByItsClass(t *testing.T) {
	for _, e := range leasetest.Effects() {
		n := NewLeaseNode(LeaseConfig(2, 3), LeaseSpec(LeaseConfig(2, 3), "w1", 2), 0, 2)
		n.created = map[string]int64{}
		built := func() (ok bool) {
			defer func() {
				if recover() != nil {
					ok = false
				}
			}()
			n.outboxEvent(time.Unix(1_800_000_000, 0), e)
			return true
		}()
		if outbox := lease.DurabilityOf(e) == lease.Outbox; built != outbox {
			t.Errorf("outboxEvent(%T) built = %v, want it exactly when DurabilityOf is outbox (%v)", e, built, lease.DurabilityOf(e))
		}
	}
	s, err := New(Config{Providers: 2, Relays: 3, LegDelay: time.Second, PublishTimeout: time.Second, QueryTimeout: time.Second,
		TickInterval: time.Second, KeepHeartbeats: 2}, []Node{
		NewLeaseNode(LeaseConfig(2, 3), LeaseSpec(LeaseConfig(2, 3), "w1", 2), 0, 2),
		NewLeaseNode(LeaseConfig(2, 3), LeaseSpec(LeaseConfig(2, 3), "w1", 2), 1, 2),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Boot()
	n := s.Node(0).(*LeaseNode)
	n.perform(envFor(s, s.provs[0]), time.Unix(1_800_000_000, 0), leasetest.Effects())
	if err := n.Err(); err != nil {
		t.Fatalf("perform(every effect) = driver error %v", err)
	}
}
