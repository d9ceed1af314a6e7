package agent

import (
	"testing"
	"time"

	"provideragent/lease"
	"provideragent/lease/leasetest"
)

// TestAgentPerformsEveryEffectByItsClass: the agent handles every lease
// effect type (a new one cannot fall through as "other"), and queues an
// outbox event exactly for the effects lease.DurabilityOf puts in the
// outbox (props/sim's LeaseNode is held to the same table:
// TestLeaseNodePerformsEveryEffectByItsClass), so the two drivers cannot
// perform an effect differently.
func TestAgentPerformsEveryEffectByItsClass(t *testing.T) {
	a := newStepAgent(t, stepOpts{})
	for _, e := range leasetest.Effects() {
		if effectType(e) == "other" {
			t.Errorf("effectType(%T) = other: the agent does not know this effect", e)
		}
		_, _, err := a.outboxEvent(e, time.Unix(1_800_000_000, 0), "")
		if outbox := lease.DurabilityOf(e) == lease.Outbox; (err == nil) != outbox {
			t.Errorf("outboxEvent(%T) error = %v, want an outbox event exactly when DurabilityOf is outbox (%v)", e, err, lease.DurabilityOf(e))
		}
	}
}
