package agent

import (
	"reflect"
	"testing"
)

// TestAgentKeepsOnlyWiring holds the Agent type to what the one-driver
// layout promised: the driver owns the lease machine's step, and the agent
// keeps the wiring around it in at most 20 fields, grouping what belongs
// together (a new concern gets its own small type, not another field).
func TestAgentKeepsOnlyWiring(t *testing.T) {
	if n := reflect.TypeFor[Agent]().NumField(); n > 20 {
		t.Errorf("Agent has %d fields, want at most 20: group the new ones by the concern they serve", n)
	}
}
