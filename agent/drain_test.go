package agent

import "testing"

func TestDrainMovedAll(t *testing.T) {
	for _, tt := range []struct {
		result string
		want   bool
	}{
		{DrainingPrefix + " moving 2 durable workloads [a b]; left running 0: []", true},
		{DrainedPrefix + " moved 2, each held by its successor: [a b]" + drainNoneFailed + "; left running 0: []", true},
		{DrainedPrefix + " moved 1, each held by its successor: [a]; not moved 1: [b (move aborted: no standby alive)]; left running 0: []", false},
		{"ok: draining off", true},
	} {
		if got := DrainMovedAll(tt.result); got != tt.want {
			t.Errorf("DrainMovedAll(%q) = %v, want %v", tt.result, got, tt.want)
		}
	}
}
