package agent

import (
	"slices"
	"testing"

	"provideragent/lease/leasetest"
)

// TestEffectTypesAreTheLabelValues: agent_effects_total is initialised with
// EffectTypes, so every effect's label must be one of them.
func TestEffectTypesAreTheLabelValues(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range leasetest.Effects() { // one example of every effect type
		typ := effectType(e)
		if !slices.Contains(EffectTypes, typ) {
			t.Errorf("effectType(%T) = %q, not in EffectTypes %v", e, typ, EffectTypes)
		}
		seen[typ] = true
	}
	if len(seen) != len(EffectTypes) {
		t.Errorf("effect types %v, EffectTypes %v: want one value per effect", seen, EffectTypes)
	}
}
