package agent

import (
	"slices"
	"testing"

	"provideragent/lease"
)

func TestWorkloadView(t *testing.T) {
	const a, b, c = "aaaa", "bbbb", "cccc"
	spec := lease.Spec{ID: "w", Primary: a, Standbys: []string{b, c}}
	tests := []struct {
		name         string
		holder, self string
		state        lease.State
		want         []string
		none         bool
		role         string
	}{
		{"before failover, on the primary", a, a, lease.StateLive, []string{b, c}, false, "primary"},
		{"before failover, on a standby", a, b, lease.StateStandby, []string{b, c}, false, "standby"},
		{"after failover to b: the former primary stands by last", b, b, lease.StateLive, []string{c, a}, false, "primary"},
		{"read from the database", b, "", lease.StateLive, []string{c, a}, false, ""},
	}
	for _, tt := range tests {
		w := lease.WorkloadSnapshot{Spec: spec, State: tt.state, Holder: tt.holder, Epoch: 2}
		got := WorkloadView(w, tt.self)
		if !slices.Equal(got.Standbys, tt.want) || got.NoStandby != tt.none || got.Role != tt.role || got.Primary != tt.holder {
			t.Errorf("%s: WorkloadView = standbys %v no_standby %v role %q holder %s, want %v %v %q %s",
				tt.name, got.Standbys, got.NoStandby, got.Role, got.Primary, tt.want, tt.none, tt.role, tt.holder)
		}
	}
	one := lease.WorkloadSnapshot{Spec: lease.Spec{ID: "w", Primary: a, Standbys: []string{b}}, State: lease.StateLive, Holder: b}
	if got := WorkloadView(one, b); !slices.Equal(got.Standbys, []string{a}) {
		t.Errorf("WorkloadView(only standby now holds it) = standbys %v, want the former primary", got.Standbys)
	}
	solo := lease.WorkloadSnapshot{Spec: lease.Spec{ID: "w", Primary: a}, State: lease.StateLive, Holder: a}
	if got := WorkloadView(solo, a); got.NoStandby {
		t.Errorf("WorkloadView(lease without standbys) no_standby = true, want false (there never was one)")
	}
}
