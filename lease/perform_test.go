package lease_test

import (
	"testing"

	"provideragent/lease"
	"provideragent/lease/leasetest"
)

// methodPerformer records which Performer methods were called.
type methodPerformer struct{ calls []string }

func (p *methodPerformer) Record(lease.Effect)             { p.calls = append(p.calls, "Record") }
func (p *methodPerformer) Start(lease.StartWorkload)       { p.calls = append(p.calls, "Start") }
func (p *methodPerformer) Stop(lease.StopWorkload)         { p.calls = append(p.calls, "Stop") }
func (p *methodPerformer) Respawn(lease.AttemptRespawn)    { p.calls = append(p.calls, "Respawn") }
func (p *methodPerformer) Queue(lease.Effect)              { p.calls = append(p.calls, "Queue") }
func (p *methodPerformer) PublishClaim(lease.PublishClaim) { p.calls = append(p.calls, "PublishClaim") }
func (p *methodPerformer) ReadClaims(lease.ReadClaims)     { p.calls = append(p.calls, "ReadClaims") }
func (p *methodPerformer) Restore(lease.RestoreCheckpoint) { p.calls = append(p.calls, "Restore") }

// TestPerformCallsTheMethodOfEachEffectsClass: Perform hands every effect
// type to exactly one Performer method, one of its durability class's, and
// no effect but a Record one reaches Record (a process or feedback type
// Perform does not name would be recorded instead of performed).
func TestPerformCallsTheMethodOfEachEffectsClass(t *testing.T) {
	methods := map[lease.Durability][]string{
		lease.Record:   {"Record"},
		lease.Process:  {"Start", "Stop", "Respawn"},
		lease.Outbox:   {"Queue"},
		lease.Feedback: {"PublishClaim", "ReadClaims", "Restore"},
	}
	for _, e := range leasetest.Effects() {
		p := &methodPerformer{}
		lease.Perform(p, e)
		d := lease.DurabilityOf(e)
		if len(p.calls) != 1 {
			t.Errorf("Perform(%T) called %v, want exactly one method", e, p.calls)
			continue
		}
		ok := false
		for _, m := range methods[d] {
			ok = ok || p.calls[0] == m
		}
		if !ok {
			t.Errorf("Perform(%T) called %s, want one of its class %s's methods %v", e, p.calls[0], d, methods[d])
		}
	}
}
