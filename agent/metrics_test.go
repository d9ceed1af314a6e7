package agent

import (
	"slices"
	"testing"

	"provideragent/lease"
)

// TestEffectTypesAreTheLabelValues: agent_effects_total is initialised with
// EffectTypes, so every effect's label must be one of them.
func TestEffectTypesAreTheLabelValues(t *testing.T) {
	effs := []lease.Effect{
		lease.EnteredState{}, lease.StartWorkload{}, lease.StopWorkload{}, lease.PublishRevocation{},
		lease.PublishClaim{}, lease.WithdrawClaim{}, lease.ReadClaims{}, lease.AnnouncePromotion{},
		lease.AttemptRespawn{}, lease.Failed{}, lease.QuorumReport{},
	}
	var got []string
	for _, e := range effs {
		typ := effectType(e)
		if !slices.Contains(EffectTypes, typ) {
			t.Errorf("effectType(%T) = %q, not in EffectTypes %v", e, typ, EffectTypes)
		}
		got = append(got, typ)
	}
	if len(got) != len(EffectTypes) {
		t.Errorf("effect types %v, EffectTypes %v: want one value per effect", got, EffectTypes)
	}
}
